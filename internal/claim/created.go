package claim

import (
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// createdRanges remembers, for the latest claims on a time-partitioned
// table, the created_at range of the rows each took, by claim token, so
// that their mark searches only the partitions of that range (settleArgs):
// a batch's rows are usually in one partition of many. A token it no
// longer has (more than createdRangesKept claims ago, or a plain table)
// marks with an unbounded range: as before, every partition is searched.
// It has a lock of its own: marks are sent by the relay's marker as well
// as by claims.
type createdRanges struct {
	mu    sync.Mutex
	byTok map[uuid.UUID][2]time.Time
	order []uuid.UUID // oldest first
}

// createdRangesKept is how many claims' ranges are kept: far more than a
// relay has unsettled (about three batches).
const createdRangesKept = 256

// put records the created_at range of rows claimed under token; a row
// without a usable created_at (zero) leaves the batch unbounded.
func (c *createdRanges) put(token uuid.UUID, rows []Row) {
	if len(rows) == 0 {
		return
	}
	lo, hi := rows[0].CreatedAt, rows[0].CreatedAt
	for _, r := range rows {
		if r.CreatedAt.IsZero() {
			return
		}
		if r.CreatedAt.Before(lo) {
			lo = r.CreatedAt
		}
		if r.CreatedAt.After(hi) {
			hi = r.CreatedAt
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTok == nil {
		c.byTok = map[uuid.UUID][2]time.Time{}
	}
	if len(c.order) >= createdRangesKept {
		delete(c.byTok, c.order[0])
		c.order = c.order[1:]
	}
	c.byTok[token] = [2]time.Time{lo, hi}
	c.order = append(c.order, token)
}

// args returns settleArgs for marking seqs of token, bounded by the range
// put recorded for it, or by -infinity .. infinity.
func (c *createdRanges) args(token uuid.UUID, seqs []int64) settleArgs {
	a := settleArgs{Seqs: seqs, Token: token,
		CreatedFrom: pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
		CreatedTo:   pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}}
	c.mu.Lock()
	r, ok := c.byTok[token]
	c.mu.Unlock()
	if ok {
		a.CreatedFrom = pgtype.Timestamptz{Time: r[0], Valid: true}
		a.CreatedTo = pgtype.Timestamptz{Time: r[1], Valid: true}
	}
	return a
}
