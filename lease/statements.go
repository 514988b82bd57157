package lease

import (
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The Claimer's SQL, written once per Claimer by New.

// planSettings, set for its own transaction by every statement batch the
// Claimer sends, keep each hot statement on its index whatever the
// table's statistics say. pgx prepares statements, and after five
// executions PostgreSQL may switch one to a generic plan, chosen with the
// statistics of that moment: planned while the table was empty (as
// autovacuum's ANALYZE finds it between bursts), the claim became a
// sequential scan and a sort of the whole table, the mark a sequential
// scan, and a 100,000-event burst after 30 s idle drained in 20.6 s
// instead of 4.9 s (relay.TestBurstAfterIdleDrainsAsFast). Forcing custom
// plans fixes that too, but re-plans the claim at every execution (0.25 ms
// of database CPU against 0.016 ms); disabling the plans that read the
// whole table keeps the cached plan and makes it the index's:
// outbox_unpublished_seq_idx in seq order for the claim and the floor, the
// seq index for mark, release and extend. JIT is off: the claim's SubPlan
// (and any plan the disabled nodes inflate) would otherwise be compiled,
// about 20 ms a claim for nothing.
const planSettings = "set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"

// prepareGuard writes the order-guard statements and the claim's lock.
func (c *Claimer) prepareGuard() {
	guard := c.guard
	// The relay records, in a claim's own transaction, a time by which all
	// its leases will have ended; other relays' claims read it to know
	// whether they need the order guard. It writes now() + 3 leases, and
	// writes again in the first claim after half a lease has passed (by the
	// monotonic clock), so every lease of a claim in between — which ends at
	// most half a lease plus that claim's own duration later — is covered
	// with more than a lease to spare, without an extra write per claim.
	c.beatSQL = `INSERT INTO ` + guard + ` (key, until) VALUES ('relay:' || $1, now() + 3 * $2 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until`
	// A release with a delay ($1 ms) or a held dead letter ($1 NULL:
	// forever) extends 'holds', by the database clock.
	c.holdSQL = `INSERT INTO ` + guard + ` (key, until)
VALUES ('holds', CASE WHEN $1::bigint IS NULL THEN 'infinity'::timestamptz ELSE now() + $1 * interval '1 millisecond' END)
ON CONFLICT (key) DO UPDATE SET until = greatest(` + guard + `.until, EXCLUDED.until)`
	c.sweepSQL = `DELETE FROM ` + guard + ` WHERE key LIKE 'relay:%' AND until < now() - interval '1 hour'`
	// Claims of relays on one table do not wait for each other: each
	// takes rows of the key partitions it owns only (owner.go), so no two
	// claims can split one aggregate's consecutive events.
	//
	// Both also say, first, whether a row backs off or is held as a dead
	// letter ('holds'): read before the claim's snapshot, false means that
	// no such row lies below the claim's resume point (resume).
	holds := `EXISTS (SELECT 1 FROM ` + guard + ` g WHERE g.key = 'holds' AND g.until > now())`
	c.lockSQL = `SELECT ` + holds + `, ` + planSettings + `, set_config('synchronous_commit', 'off', true)`
	// A claim that registers the relay in the order guard commits
	// synchronously: relays of older versions skip their guard on the
	// strength of that row, so a database crash must not lose it while its
	// leases survive.
	c.lockSyncSQL = `SELECT ` + holds + `, ` + planSettings
}

// prepareClaim writes the claim statement.
func (c *Claimer) prepareClaim() {
	cfg, t, guard := c.cfg, sqlname.Quote(c.cfg.Table), c.guard
	col := sqlname.Column
	id, agg, typ, payload := col(cfg.Columns.ID), col(cfg.Columns.AggregateID), col(cfg.Columns.EventType), col(cfg.Columns.Payload)
	aggType := "NULL::text"
	if cfg.Columns.AggregateType != "" {
		aggType = "o." + col(cfg.Columns.AggregateType) + "::text"
	}
	// One statement: a CTE (referenced twice, so materialized: evaluated
	// once) picks the candidates, the UPDATE leases exactly those, found by
	// ctid (a TID scan, no index lookup; on a partitioned table by tableoid
	// and ctid, joined: c.addr, sqlname.RowAddress). Never `UPDATE ... WHERE id IN
	// (SELECT ... LIMIT n)`: the planner may run that subquery more than
	// once and lease more than n rows (PostgreSQL bug #15715). The
	// candidates are not row-locked (FOR UPDATE SKIP LOCKED): no other
	// relay claims rows of this relay's partitions, its own claims are
	// serialized by Claimer.mu, and the only other writer of a claimable
	// row is the relay whose lease on it ended, settling it late; the
	// UPDATE then waits for that transaction and skips the row, whose ctid
	// changed. A row lock is a WAL record of its own per row (about 54
	// bytes per event).
	//
	// The guard keeps per-aggregate order across retries: a row is not
	// claimable while an earlier unpublished row of its aggregate is
	// backing off after a failed publish (locked_by NULL, locked_until in
	// the future), held as a dead letter, or leased under another holder.
	// This relay's own leases do not block it: it publishes its batches one
	// after the other, in seq order. The guard is a scalar subquery on purpose:
	// written as NOT EXISTS the planner turns it into an anti-join that
	// reads the whole table once per claim; as a correlated SubPlan it is
	// one probe of outbox_unpublished_aggregate_idx per candidate, which
	// stops at the first blocking row. JIT is off for the claim
	// (set_config above): the SubPlan's pessimistic cost estimate would
	// otherwise trigger JIT compilation, about 20ms per claim for nothing.
	st := NewStates(cfg.Table, cfg.Columns)
	relays, parts := sqlname.Beside(cfg.Table, "_relays"), sqlname.Beside(cfg.Table, "_partitions")
	// The guard's probes start at the lowest unpublished seq at or above
	// the floor ($6, or 0 after a restart of the sequence: lo below),
	// computed once per claim (an InitPlan): no row below
	// it is leased or backing off. Every probe walks its aggregate's index
	// entries from there, dead ones included; from seq 0 (a new relay, or
	// a rescan) each probe would walk its aggregate's whole history while a
	// long transaction keeps VACUUM from removing it.
	guardFrom := `(SELECT coalesce(min(m.seq), (SELECT guard FROM lo)) FROM ` + t + ` m WHERE m.published_at IS NULL AND m.seq >= (SELECT guard FROM lo))`
	// Ownership ($7 the member, $8 the partitions it is giving back): the
	// member must be live, its lease on a row ends no later than its
	// membership, and only rows of the partitions it owns (and keeps) are
	// candidates. Both CTEs are evaluated once; with no partition owned
	// the scan does not run at all. owned is a mask indexed by partition,
	// so testing a row is one array subscript: written as key_partition IN
	// (SELECT partition FROM owned), the planner made it a nested-loop
	// semi-join that walked the list of owned partitions for every
	// candidate (with one relay owning 256 of them, 17 of a 500-row
	// claim's 22 ms).
	//
	// The guard ($9: a claim of this relay's whose answer was lost may
	// have leased rows under an earlier holder) is needed only while a row
	// could block a later event of its aggregate: a row backing off or a
	// held dead letter ('holds' in the order guard), or such a lost claim.
	// Other relays' leases cannot: they own other partitions, and a
	// partition changes hands only once nothing of it is leased.
	//
	// The byte bound ($10, Config.MaxBatchBytes): the scan's rows are
	// taken in seq order while the payload bytes before each stay under
	// it, so a claim always takes its first row, whatever its size. The
	// sizes are payload_size (migration 00010: the uncompressed size,
	// recorded at insert), read from the heap tuple the scan visits
	// anyway; no payload is read to size it (pg_column_size of a stored
	// value is its compressed size, 1% of it for repetitive JSON, and
	// detoasting each candidate would read every payload twice). A row
	// without one (written before the migration, or with triggers off)
	// counts as the whole bound: at most one such row per claim, after
	// what fits. The running sum is computed only when the scan's rows
	// (at most $1 of them) come to the bound or more: a One-Time Filter
	// on their total gates the branch with the window and its sort of
	// those rows, so a claim of small payloads costs one aggregate over
	// its own rows more, not a window over every row it scans. The last
	// column says the bound left
	// claimable rows behind, so the relay claims again at once as after a
	// full batch (Batch.More). A payload larger than the bound itself is
	// not read at all (CASE in RETURNING): its row comes back with
	// DecodeErr, and the relay dead-letters it, so that one huge row
	// cannot take the relay past its memory bound either.
	//
	// The floor ($6; $5 is where this claim scans from: the floor, or 0
	// for a rescan) holds only while the sequence moves forward. Normally
	// its last value is at least the floor minus one (the floor never
	// passes a value the sequence handed out). Below that, the sequence
	// went back (ALTER SEQUENCE ... RESTART, a logical-replication
	// cutover) and new rows have seqs below the floor, where only the
	// once-a-minute rescan would find them: the claim scans, and its
	// guard probes, from seq 0 (lo, one InitPlan: a sequence read) until
	// the Claimer's next advance drops its floor (Claimer.restarted).
	seqName := `pg_get_serial_sequence(` + sqlname.Literal(t) + `, 'seq')::regclass`
	c.claimSQL = `WITH lo AS MATERIALIZED (
  SELECT CASE WHEN s.last < $6 - 1 THEN 0 ELSE $5 END AS scan, CASE WHEN s.last < $6 - 1 THEN 0 ELSE $6 END AS guard
  FROM (SELECT coalesce(pg_sequence_last_value(` + seqName + `), 0) AS last) s
), me AS MATERIALIZED (
  SELECT r.until FROM ` + relays + ` r WHERE r.member = $7 AND r.until > now()
), owned AS MATERIALIZED (
  SELECT array_agg(p.owner IS NOT DISTINCT FROM $7 AND p.partition <> ALL($8::int[]) ORDER BY p.partition) AS mask,
    bool_or(p.owner IS NOT DISTINCT FROM $7 AND p.partition <> ALL($8::int[])) AS owns_any
  FROM ` + parts + ` p WHERE EXISTS (SELECT 1 FROM me)
), scan AS (
  SELECT ` + c.addr.Select("o") + `, o.seq, o.locked_by IS NOT NULL AS taken_over, coalesce(o.payload_size, $10) AS size
  FROM ` + t + ` o
  WHERE (SELECT owns_any FROM owned)
    AND ` + st.Live("o") + `
    AND o.seq >= (SELECT scan FROM lo)
    AND ` + st.LeaseFree("o") + `
    AND (SELECT mask FROM owned)[` + c.keyPartition + ` + 1]
    AND (NOT ($9::bool OR (SELECT EXISTS (SELECT 1 FROM ` + guard + ` g WHERE g.key = 'holds' AND g.until > now())))
      OR NOT ` + st.Waiting("o", "$3", guardFrom) + `)
  ORDER BY o.seq
  LIMIT $1
), candidates AS (
  SELECT ` + c.addr.Select("") + `, taken_over FROM scan WHERE (SELECT sum(size) FROM scan) < $10
  UNION ALL
  SELECT ` + c.addr.Select("") + `, taken_over FROM (
    SELECT ` + c.addr.Select("") + `, taken_over, sum(size) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) - size AS before
    FROM scan WHERE (SELECT sum(size) FROM scan) >= $10
  ) w WHERE before < $10
), claimed AS (
UPDATE ` + t + ` o
SET locked_until = least(now() + $2 * interval '1 millisecond', (SELECT until FROM me)), locked_by = $3, claim_token = $4` + c.addr.Match("o", "candidates") + `
RETURNING o.seq, o.` + id + `::text, o.` + agg + `::text, o.` + typ + `::text, CASE WHEN o.payload_size > $10 THEN NULL ELSE o.` + payload + ` END,
  o.headers, o.topic, o.created_at, o.attempts, o.locked_until, ` + aggType + `,
  ` + c.keyPartition + `, (extract(epoch FROM o.locked_until - now()) * 1000)::bigint, o.payload_size
)
SELECT claimed.*, (SELECT count(*) FROM candidates WHERE taken_over), (SELECT count(*) FROM scan) > (SELECT count(*) FROM candidates) FROM claimed`
	// Read after each claim: the generation (a change means another relay
	// joined, left or moved partitions) and whether a member's membership
	// ran out (its partitions are free): either makes the next claim
	// rebalance first.
	c.ownerSQL = `SELECT m.generation, EXISTS (SELECT 1 FROM ` + relays + ` r WHERE r.until <= now()) FROM ` + sqlname.Beside(cfg.Table, "_partitioning") + ` m`
}

// prepareFloor writes the floor's statements.
func (c *Claimer) prepareFloor() {
	t := sqlname.Quote(c.cfg.Table)
	// The floor: a seq below which every row is published. Published rows
	// leave the partial indexes only when VACUUM cleans them (and a large
	// table's autovacuum may skip index cleanup for a long time: PG 14+'s
	// INDEX_CLEANUP auto bypass; a transaction holding an old snapshot
	// stops it altogether), so an index scan from the start would walk over
	// every published row's dead entry, and each claim would get slower as
	// events are published. Claims start at the floor instead. It moves
	// only over published rows and over seqs that are final: a marker
	// records the sequence's last value and then the transactions holding a
	// lock on the sequence, and counts once they have all ended (see
	// marker). A transaction that calls nextval on a sequence takes a
	// RowExclusiveLock on it and keeps it until it ends
	// (src/backend/commands/sequence.c, lock_and_open_sequence: "owned by
	// the top transaction"), before it takes a value, so every transaction
	// that may still commit a row with a seq at or below the marker's is
	// among them: a COPY buffering rows it has taken seqs for, an INSERT
	// with a slow expression after its nextval, a transaction PREPAREd
	// after it (prepared transactions keep their locks; pg_locks shows
	// them without a pid). A transaction that took no seq — an idle
	// session holding a REPEATABLE READ snapshot, a long report — does not
	// hold the floor back (it used to: the floor waited for every
	// transaction in the database, and claims slowed down linearly while
	// one was open). A sequence with CACHE > 1 hands out values a session
	// cached in earlier transactions without taking the lock again: then
	// the floor stays at 0. Every rescanEvery a claim scans from seq 0 all
	// the same.
	seqName := `pg_get_serial_sequence(` + sqlname.Literal(t) + `, 'seq')::regclass`
	c.advanceSeqSQL = `SELECT coalesce(pg_sequence_last_value(` + seqName + `), 0),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = ` + seqName + `)`
	c.advanceVXIDSQL = `SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}')
FROM pg_locks l
WHERE l.locktype = 'relation' AND l.relation = ` + seqName + `
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()`
	// The lowest unpublished row counts only in the partitions this relay
	// owns ($2, indexed by key partition; NULL: every row), the ones its
	// claims take: with several relays, another relay's backlog would
	// otherwise hold this relay's floor back, and each of its claims would
	// walk every row the two relays published since (their index entries
	// stay until VACUUM) and every row of the other's partitions. The
	// floor drops when the relay acquires partitions (Claimer.rebalance).
	c.advanceSQL = `SELECT (SELECT min(o.seq) FROM ` + t + ` o WHERE o.published_at IS NULL AND o.seq >= $1
  AND ($2::bool[] IS NULL OR coalesce(($2::bool[])[` + c.keyPartition + ` + 1], true)))`
}

// prepareSettle writes the statements that end a lease: mark, extend,
// release, dead-letter.
func (c *Claimer) prepareSettle() {
	t := sqlname.Quote(c.cfg.Table)
	// Rows are named by seq, whatever the type of the event ID column
	// (uuid, text, bigint): bigint[] travels in every pgx query exec mode.
	// Each statement finds its rows in a CTE ordered by seq, which (with
	// enable_sort off, planSettings) only outbox_unpublished_seq_idx can
	// produce, probed with seq = ANY(...); the UPDATE then takes them by
	// ctid (c.addr; on a partitioned table each partition's own index is
	// probed, merged by seq, and rows are named by tableoid and ctid). Not FOR UPDATE: a row lock is a WAL record of its own (58 more
	// WAL bytes per event measured), and a row updated by another
	// transaction in between (only another relay's takeover, after this
	// lease ended: this relay's own settle statements name disjoint rows)
	// fails the ctid recheck and is left alone, as it must be. Written as a plain `UPDATE ... WHERE seq = ANY(...)`,
	// the planner, misled by the partial indexes' live-row counts, chose a
	// full scan of outbox_unpublished_aggregate_idx with a filter: while a
	// long transaction kept VACUUM from removing its dead entries, a mark
	// of 200 rows took 637 ms (make soak, 2 relays, 4 minutes of a held
	// snapshot) against 0.44 ms this way, and the claims carrying the
	// marks waited behind each other on the claim lock.
	bySeq := func(set string) string {
		return `WITH settled AS (
  SELECT ` + c.addr.Select("") + ` FROM ` + t + `
  WHERE seq = ANY($1::bigint[]) AND claim_token = $2::uuid AND published_at IS NULL
  ORDER BY seq
)
UPDATE ` + t + ` SET ` + set + c.addr.Match("", "settled")
	}
	c.markSQL = bySeq(`published_at = now(), locked_until = NULL, last_error = NULL`)
	// An extension, like a claim, never outlives the membership of the
	// relay ($4), and only rows of partitions it still owns are extended.
	relays, parts := sqlname.Beside(c.cfg.Table, "_relays"), sqlname.Beside(c.cfg.Table, "_partitions")
	c.extendSQL = `WITH me AS MATERIALIZED (
  SELECT r.until FROM ` + relays + ` r WHERE r.member = $4 AND r.until > now()
), settled AS (
  SELECT ` + c.addr.Select("o") + ` FROM ` + t + ` o
  WHERE o.seq = ANY($1::bigint[]) AND o.claim_token = $2::uuid AND o.published_at IS NULL
    AND ` + c.keyPartition + ` IN (SELECT p.partition FROM ` + parts + ` p WHERE p.owner = $4)
    AND EXISTS (SELECT 1 FROM me)
  ORDER BY o.seq
)
UPDATE ` + t + ` o SET locked_until = least(now() + $3 * interval '1 millisecond', (SELECT until FROM me))` + c.addr.Match("o", "settled") + `
RETURNING o.seq, (extract(epoch FROM o.locked_until - now()) * 1000)::bigint`
	c.releaseSQL = bySeq(`locked_until = CASE WHEN $3::bigint > 0 THEN now() + $3::bigint * interval '1 millisecond' END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + $4::int, last_error = COALESCE($5::text, last_error)`)
	c.deadSQL = bySeq(`dead_lettered_at = now(),
    locked_until = CASE WHEN $3::bool THEN 'infinity'::timestamptz END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + $4::int, last_error = $5::text`)
}

// prepareRequeue writes requeue's statement, which names rows by their
// event IDs, not by address (so prepared leaves it alone).
func (c *Claimer) prepareRequeue() {
	t, id := sqlname.Quote(c.cfg.Table), sqlname.Column(c.cfg.Columns.ID)
	c.requeueSQL = `UPDATE ` + t + `
SET dead_lettered_at = NULL, locked_until = NULL, attempts = 0
WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL AND ($1::text[] IS NULL OR ` + id + `::text = ANY($1::text[]))`
}
