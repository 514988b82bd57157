package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ownership"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The owners report: who owns the table's key partitions, for
// `outbox-relay status` and the tests and benchmarks that wait for
// ownership to settle, and the check that the table has key partitions
// (CheckPartitions, which the relay runs at start). The ownership itself is
// owner.go and rebalance.go.

// CheckPartitions returns an error wrapping ErrNotMigrated when table
// (optionally schema-qualified) has no key partitions yet (migration 00009
// has not run) or their backfill has not finished; nil when it is ready.
// Other errors are the database's, wrapped as "check key partitions: ...".
func CheckPartitions(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) error {
	q, err := renderTableStmt("CheckPartitions", table)
	if err != nil {
		return err
	}
	var done bool
	err = db.QueryRow(ctx, q).Scan(&done)
	switch {
	case IsMissingTable(err), err == nil && !done, errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("table %s: %w", table, ErrNotMigrated)
	case err != nil:
		return fmt.Errorf("check key partitions: %w", err)
	}
	return nil
}

// Owners is who owns the table's key partitions, as `outbox-relay status`
// shows it.
type Owners struct {
	// Partitions is the table's number of key partitions.
	Partitions int `json:"partitions"`
	// Relays are the members, live or whose membership ran out (they are
	// removed at the next rebalance), by member name.
	Relays []MemberOwnership `json:"relays"`
	// Free lists the partitions nobody owns.
	Free []int `json:"free"`
}

// MemberOwnership is one member of Owners.
type MemberOwnership struct {
	Member    string    `json:"member" db:"member"`
	RelayID   string    `json:"relay_id" db:"relay_id"`
	StartedAt time.Time `json:"started_at" db:"started_at"`
	RenewedAt time.Time `json:"renewed_at" db:"renewed_at"`
	// Until is when its membership ends unless renewed; Live whether that
	// is still ahead (by the database clock).
	Until time.Time `json:"until" db:"until"`
	Live  bool      `json:"live" db:"live"`
	// Owned are the partitions it owns, since the earliest of Since.
	Owned []int     `json:"owned" db:"-"`
	Since time.Time `json:"since,omitzero" db:"-"`
}

// ReadOwners reads who owns table's key partitions (optionally
// schema-qualified). It returns an error wrapping ErrNotMigrated for a
// table without key partitions.
func ReadOwners(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) (*Owners, error) {
	if err := CheckPartitions(ctx, db, table); err != nil {
		return nil, err
	}
	var count, members, owners string
	for _, r := range []struct {
		sql  *string
		name string
	}{{&count, "ReadPartitionCount"}, {&members, "ReadMembers"}, {&owners, "ReadOwners"}} {
		var err error
		if *r.sql, err = renderTableStmt(r.name, table); err != nil {
			return nil, err
		}
	}
	o := &Owners{Relays: []MemberOwnership{}, Free: []int{}}
	if err := db.QueryRow(ctx, count).Scan(&o.Partitions); err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	rows, err := db.Query(ctx, members)
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	relays, err := pgx.CollectRows(rows, pgx.RowToStructByName[MemberOwnership])
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	index := map[string]int{}
	for _, m := range relays {
		m.Owned = []int{}
		index[m.Member] = len(o.Relays)
		o.Relays = append(o.Relays, m)
	}
	rows, err = db.Query(ctx, owners)
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	owned, err := pgx.CollectRows(rows, pgx.RowToStructByName[ownedRow])
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	for _, row := range owned {
		p, who, since := row.Partition, row.Owner, row.Since
		i, ok := index[who]
		if !ok {
			o.Free = append(o.Free, p)
			continue
		}
		m := &o.Relays[i]
		m.Owned = append(m.Owned, p)
		if since != nil && (m.Since.IsZero() || since.Before(m.Since)) {
			m.Since = *since
		}
	}
	return o, nil
}

// ownedRow is a row of the ReadOwners statement: a key partition, its
// owner ("" for nobody) and since when (nil: never owned).
type ownedRow struct {
	Partition int        `db:"partition"`
	Owner     string     `db:"owner"`
	Since     *time.Time `db:"since"`
}

// Settled reports whether ownership is at rest: at least one member is
// live, and every partition is owned by the live member that Assign gives
// it among the live members, so no handover is pending. Relays that
// joined or left a moment ago make it false until the rebalances they
// cause are done (a few heartbeats; see Config.Lease).
func (o *Owners) Settled() bool {
	var live []string
	for _, m := range o.Relays {
		if m.Live {
			live = append(live, m.Member)
		}
	}
	want := ownership.Assign(live, o.Partitions)
	if want == nil {
		return false
	}
	have := make([]string, o.Partitions)
	for _, m := range o.Relays {
		for _, p := range m.Owned {
			if p >= 0 && p < len(have) {
				have[p] = m.Member
			}
		}
	}
	return slices.Equal(want, have)
}

// renderTableStmt renders the query name, a statement without arguments,
// for table (these functions take the table per call, off the claim's
// path). Slots: table_literal, relays, partitions, partitioning.
func renderTableStmt(name, table string) (string, error) {
	slots := map[string]string{
		"table_literal": sqlname.Literal(sqlname.Quote(table)),
		"relays":        sqlname.Beside(table, "_relays"),
		"partitions":    sqlname.Beside(table, "_partitions"),
		"partitioning":  sqlname.Beside(table, "_partitioning"),
	}
	s, err := sqlfile.Render[sqlfile.NoArgs](queries, name, slots)
	if err != nil {
		return "", fmt.Errorf("claim: render statement: %w", err)
	}
	return s.SQL, nil
}
