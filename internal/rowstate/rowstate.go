// Package rowstate names the states of an outbox row and writes the SQL
// predicates behind them once, so that the claim (lease), the metrics
// gauges and the status and inspect commands never disagree.
package rowstate

import "github.com/pgoutbox/outbox/internal/sqlname"

// Row states, as the claim, the metrics gauges and the status and inspect
// commands all name them. Each unpublished row is in exactly one:
const (
	// StatePublished: Kafka acknowledged it and a relay marked it.
	StatePublished = "published"
	// StateDeadLettered: parked (dead_lettered_at set) until
	// `outbox-relay requeue`.
	StateDeadLettered = "dead_lettered"
	// StateLeased: claimed by a relay whose lease has not ended.
	StateLeased = "leased"
	// StateBackingOff: a failed publish waits for its retry.
	StateBackingOff = "backing_off"
	// StateHeld: its own lease is free, but an earlier unpublished event
	// of its aggregate is backing off or held as a dead letter
	// (locked_until 'infinity'): the claim's order guard keeps it back.
	StateHeld = "held"
	// StateClaimable: the next claim may take it. An earlier event of its
	// aggregate that a relay leased does not hold it back: the relay that
	// owns the aggregate's key partition claims it next (its own leases
	// never block its claims).
	StateClaimable = "claimable"
)

// States are the SQL predicates behind the row states, written once so that
// the claim, the gauges, status and inspect never disagree. Each method
// takes the alias of the outbox table in the caller's query and returns a
// boolean SQL expression.
type States struct {
	table, agg string
}

// NewStates returns the predicates for table (optionally schema-qualified)
// whose aggregate ID column is aggregateColumn ("" for aggregate_id).
func NewStates(table, aggregateColumn string) States {
	if aggregateColumn == "" {
		aggregateColumn = "aggregate_id"
	}
	return States{table: sqlname.Quote(table), agg: sqlname.Column(aggregateColumn)}
}

// Live: unpublished and not dead-lettered.
func (s States) Live(a string) string {
	return a + ".published_at IS NULL AND " + a + ".dead_lettered_at IS NULL"
}

// LeaseFree: no lease or backoff runs (locked_until NULL or past, by the
// database clock).
func (s States) LeaseFree(a string) string {
	return "(" + a + ".locked_until IS NULL OR " + a + ".locked_until <= now())"
}

// Waiting: an earlier unpublished row of a's aggregate is leased, backing
// off or held as a dead letter (its locked_until is in the future). holder,
// if not empty, is a SQL expression naming a relay whose own leases do not
// count (the claiming relay's: it publishes its batches in order); floor,
// if not empty, a SQL expression below which no row is unpublished (the
// claimer's floor); skipped, if not empty, a SQL expression below which the
// claim does not scan (its resume point): an earlier row of the aggregate
// below it that is live and not the holder's also counts, since the claim
// would pass over it while taking a.
//
// Written as a scalar subquery on purpose: as NOT EXISTS the planner turns
// it into an anti-join that reads the whole table once per claim; as a
// correlated SubPlan it is one probe of outbox_unpublished_aggregate_idx
// per candidate, which stops at the first blocking row (the claim turns
// bitmap scans off, PlanSettings: a bitmap probe reads its whole range
// first). With byRow, the probe's bounds are row comparisons on
// (aggregate, seq), which only that index can serve: with bounds scalar on
// seq, the generic plan may probe outbox_unpublished_seq_idx instead (it
// did when one aggregate held most unpublished rows), walking every row
// between the floor and a, of every aggregate, for each candidate. Row
// comparisons cost about twice as much per probe (13 against 6 µs), so the
// claim uses them only while rows are held behind a dead letter.
func (s States) Waiting(a, holder, floor, skipped string, byRow bool) string {
	q := `COALESCE((SELECT true FROM ` + s.table + ` p
      WHERE p.published_at IS NULL`
	switch {
	case byRow && floor != "":
		q += `
        AND (p.` + s.agg + `, p.seq) < (` + a + `.` + s.agg + `, ` + a + `.seq)
        AND (p.` + s.agg + `, p.seq) >= (` + a + `.` + s.agg + `, ` + floor + `)`
	case byRow:
		q += `
        AND p.` + s.agg + ` = ` + a + `.` + s.agg + `
        AND (p.` + s.agg + `, p.seq) < (` + a + `.` + s.agg + `, ` + a + `.seq)`
	default:
		q += `
        AND p.` + s.agg + ` = ` + a + `.` + s.agg + `
        AND p.seq < ` + a + `.seq`
		if floor != "" {
			q += `
        AND p.seq >= ` + floor
		}
	}
	if skipped != "" {
		q += `
        AND (p.locked_until > now() OR (p.seq < ` + skipped + ` AND p.dead_lettered_at IS NULL))`
	} else {
		q += `
        AND p.locked_until > now()`
	}
	if holder != "" {
		q += `
        AND p.locked_by IS DISTINCT FROM ` + holder
	}
	return q + `
      LIMIT 1), false)`
}

// HeldBehind: an earlier unpublished row of a's aggregate is backing off
// or held as a dead letter (locked_by NULL, locked_until in the future):
// the claim's order guard keeps a back. An earlier row leased by a relay
// does not hold it: every row of an aggregate belongs to the key partition
// its owner claims from, and a relay's own leases never block its claims,
// so the owner claims the row next. (The gauges read the oldest row not
// held so; counting leases as holding rows back made them walk the whole
// backlog while the relays drained it, and report nothing claimable.)
func (s States) HeldBehind(a string) string {
	return `COALESCE((SELECT true FROM ` + s.table + ` p
      WHERE p.` + s.agg + ` = ` + a + `.` + s.agg + `
        AND p.published_at IS NULL
        AND p.seq < ` + a + `.seq
        AND p.locked_until > now()
        AND p.locked_by IS NULL
      LIMIT 1), false)`
}

// Claimable: live, its lease free, and not held behind an earlier row of
// its aggregate (HeldBehind).
func (s States) Claimable(a string) string {
	return s.Live(a) + " AND " + s.LeaseFree(a) + " AND NOT " + s.HeldBehind(a)
}

// State is a CASE expression giving a's state, one of the State* names.
func (s States) State(a string) string {
	return `CASE
    WHEN ` + a + `.published_at IS NOT NULL THEN '` + StatePublished + `'
    WHEN ` + a + `.dead_lettered_at IS NOT NULL THEN '` + StateDeadLettered + `'
    WHEN ` + a + `.locked_by IS NOT NULL AND ` + a + `.locked_until > now() THEN '` + StateLeased + `'
    WHEN ` + a + `.locked_by IS NULL AND ` + a + `.locked_until > now() THEN '` + StateBackingOff + `'
    WHEN ` + s.HeldBehind(a) + ` THEN '` + StateHeld + `'
    ELSE '` + StateClaimable + `'
  END`
}
