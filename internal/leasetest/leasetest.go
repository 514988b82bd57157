// Package leasetest helps tests that run several claim.Claimers on one
// table: settling their ownership of the key partitions, and finding
// aggregates whose partitions a given claimer owns.
package leasetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// Settle claims with every claimer (settling each empty or not batch at
// once) until the key-partition ownership of table is settled with
// len(claimers) relays, within 30 s, and returns the owners. A claim
// error fails the test.
func Settle(t testing.TB, pool *pgxpool.Pool, table string, claimers ...*claim.Claimer) *claim.Owners {
	t.Helper()
	ctx := context.Background()
	var o *claim.Owners
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, c := range claimers {
			b, err := c.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c.Settled(b.Token, time.Time{})
		}
		var err error
		o, err = claim.ReadOwners(ctx, pool, table)
		return err == nil && o != nil && len(o.Relays) == len(claimers) && o.Settled()
	}, "%d claimers did not settle their ownership of %s", len(claimers), table)
	return o
}

// Aggregates returns n aggregate IDs ("agg-0", "agg-1", ...) for each
// member of o that owns partitions, those whose key partitions the
// member owns.
func Aggregates(o *claim.Owners, n int) map[string][]string {
	ownerOf := make([]string, o.Partitions)
	owners := 0
	for _, m := range o.Relays {
		for _, p := range m.Owned {
			ownerOf[p] = m.Member
		}
		if len(m.Owned) > 0 {
			owners++
		}
	}
	out := map[string][]string{}
	full := 0
	for i := 0; full < owners; i++ {
		a := fmt.Sprint("agg-", i)
		m := ownerOf[outbox.KeyPartition(a, o.Partitions)]
		if m == "" || len(out[m]) >= n {
			continue
		}
		out[m] = append(out[m], a)
		if len(out[m]) == n {
			full++
		}
	}
	return out
}
