// Package lease claims batches of outbox rows for one relay, marks them
// published and releases them, with all lease arithmetic done by the
// database clock.
//
// A claim is one short transaction: it takes the lowest-seq unpublished rows
// whose lease is free (locked_until NULL or past), skipping rows locked by a
// concurrent claimer (FOR UPDATE SKIP LOCKED) and rows whose aggregate has an
// earlier event that another relay holds or that is backing off, sets
// locked_until = now() + lease and a fresh claim token, and commits at once.
// Kafka is never called inside it. MarkPublished and Release are fenced by the
// claim token: once a lease expired and another relay re-claimed the rows, the
// first holder's late mark or release changes nothing.
package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// Config configures a Claimer.
type Config struct {
	// Table is the outbox table, optionally schema-qualified. Defaults to
	// "outbox".
	Table string
	// Lease is how long a claim holds its rows before another relay may
	// take them: it must cover publishing and marking one batch. Defaults
	// to 30s. Minimum 1s.
	Lease time.Duration
	// BatchSize is the most rows one claim returns. Defaults to 500.
	BatchSize int
	// RelayID names this relay in locked_by (status, logs); the Claimer
	// appends "/<8 hex digits>" per instance (Claimer.Holder), so a relay
	// restarted with the same ID never mistakes its previous incarnation's
	// leases for its own. Defaults to
	// "<hostname>-<random>".
	RelayID string
	// Columns names the columns that hold the event's fields, for an
	// existing outbox table whose producers cannot change (a Debezium
	// outbox table: see sql.Adopt). Defaults to pgoutbox's names.
	Columns Columns
}

// Columns maps an event's fields to column names. The lease bookkeeping
// columns (seq, locked_until, ...) always have pgoutbox's names.
type Columns struct {
	// ID is the event ID column, of type uuid. Defaults to "id".
	ID string
	// AggregateID is the aggregate (Kafka key) column, text. Defaults to
	// "aggregate_id"; Debezium: "aggregateid".
	AggregateID string
	// EventType is the event type column, text. Defaults to "event_type";
	// Debezium: "type".
	EventType string
	// Payload is the payload column, jsonb or text. Defaults to "payload".
	Payload string
	// AggregateType is an optional column whose value routes the event
	// (relay.Config.TopicTemplate's ${aggregatetype}); Debezium:
	// "aggregatetype". Defaults to "" (none).
	AggregateType string
}

// DebeziumColumns are the columns of Debezium's Outbox Event Router table
// (id, aggregatetype, aggregateid, type, payload).
var DebeziumColumns = Columns{ID: "id", AggregateID: "aggregateid", EventType: "type", Payload: "payload", AggregateType: "aggregatetype"}

// DefaultLease is Config.Lease's default.
const DefaultLease = 30 * time.Second

// DefaultBatchSize is Config.BatchSize's default.
const DefaultBatchSize = 500

// MaxBatchSize bounds Config.BatchSize.
const MaxBatchSize = 10000

// DefaultTable is Config.Table's default.
const DefaultTable = "outbox"

// WithDefaults returns a copy of c with every zero field set to its
// default (RelayID: a new DefaultRelayID on each call).
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.RelayID == "" {
		c.RelayID = DefaultRelayID()
	}
	if c.Columns.ID == "" {
		c.Columns.ID = "id"
	}
	if c.Columns.AggregateID == "" {
		c.Columns.AggregateID = "aggregate_id"
	}
	if c.Columns.EventType == "" {
		c.Columns.EventType = "event_type"
	}
	if c.Columns.Payload == "" {
		c.Columns.Payload = "payload"
	}
	return c
}

// Validate returns a *outbox.FieldError naming the first invalid field of c
// with its defaults applied; c itself is not changed.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Lease < time.Second:
		return config.Invalid("lease", "Lease", "must be at least 1s, got %s", c.Lease)
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return config.Invalid("lease", "BatchSize", "must be 1..%d, got %d", MaxBatchSize, c.BatchSize)
	case strings.Count(c.Table, ".") > 1:
		return config.Invalid("lease", "Table", "%q is not a table or schema.table name", c.Table)
	}
	return nil
}

// Row is one claimed outbox row.
type Row struct {
	// Seq is the insert order (the identity column); it also identifies the
	// row to MarkPublished, Release, DeadLetter and Extend.
	Seq int64
	// ID is the event ID as text, the Kafka header event_id: a uuid column's
	// canonical form, or a text or bigint column's value (adopted tables).
	ID string
	// AggregateID is the Kafka key.
	AggregateID string
	// EventType is the Kafka header event_type.
	EventType string
	// Payload is the payload column's bytes: JSON text for jsonb (as
	// PostgreSQL prints it back) and json, the characters for text, the raw
	// bytes for bytea; nil if the column is NULL.
	Payload []byte
	// Headers are the row's extra headers (jsonb object of strings); nil if
	// none.
	Headers map[string]string
	// Topic is the row's topic, "" to use the relay's.
	Topic string
	// AggregateType is the Columns.AggregateType column's value; "" when
	// that column is not configured or NULL.
	AggregateType string
	// CreatedAt is the inserting transaction's start time (database clock).
	CreatedAt time.Time
	// Attempts counts earlier failed publishes of this row.
	Attempts int
	// DecodeErr is set when the row cannot become a Kafka record (its
	// headers are not a JSON object): the relay dead-letters it at once
	// with this reason. The other fields are still filled in.
	DecodeErr error
}

// Batch is the result of one claim.
type Batch struct {
	// Token fences MarkPublished and Release to this claim.
	Token uuid.UUID
	// Rows are ordered by Seq.
	Rows []Row
	// LockedUntil is when the lease ends, by the database clock.
	LockedUntil time.Time
	// TakenOver counts rows whose previous lease had expired without a
	// mark or release: a relay died or stalled holding them (a lease
	// takeover). They may have been published already.
	TakenOver int
	// Claimed is when the claim committed, by this host's clock; with
	// Config.Lease it gives a local deadline that is safe against clock
	// skew because it only measures elapsed time.
	Claimed time.Time
}

// Deadline is the local time (monotonic clock) by which the batch must be
// published and marked before its lease may pass to another relay.
func (b *Batch) Deadline(lease time.Duration) time.Time { return b.Claimed.Add(lease) }

// Claimer claims, marks and releases outbox rows through a pool.
type Claimer struct {
	cfg        Config
	pool       *pgxpool.Pool
	holder     string
	guard      string // quoted name of the order-guard table
	beatSQL    string
	holdSQL    string
	sweepSQL   string
	advanceSQL string
	// advanceSeqSQL and advanceVXIDSQL read the identity's last value and
	// the running transactions for a floor marker.
	advanceSeqSQL, advanceVXIDSQL string
	claimSQL                      string
	markSQL                       string
	extendSQL                     string
	releaseSQL                    string
	deadSQL                       string
	requeueSQL                    string
	lockSQL                       string
	lockSyncSQL                   string

	// The floor (see advance) is used and moved only by Claim.
	mu          sync.Mutex
	floor       int64
	markers     []marker
	lastAdvance time.Time
	lastBeat    time.Time // when the last registry write was sent
	lastRescan  time.Time // when a claim last scanned from seq 0
}

// rescanEvery is how often a claim ignores the floor and scans from the
// start, so that nothing the floor passed by mistake waits longer.
const rescanEvery = 10 * time.Second

// marker says: every row with seq <= seq got its seq from a transaction
// that had ended or was one of vxids (the virtual transaction IDs running
// in this database, read after the sequence). Once none of vxids runs any
// more (phase 1) and, after that, every transaction whose xid is below
// xmax has ended (phase 2: a transaction that PREPAREd gives up its vxid
// lock but keeps its xid, which is below the xmax read after the vxids),
// every row with seq <= seq is final: committed or rolled back.
type marker struct {
	seq   int64
	vxids []string
	// xmax is 0 in phase 1; in phase 2, the snapshot xmax read after the
	// vxids were all gone.
	xmax int64
}

// advanceEvery is how often Claim moves the floor.
const advanceEvery = 20 * time.Millisecond

// maxMarkers bounds the pending markers (about 20 s of them) while a long
// transaction holds them back; meanwhile the floor stays where it is.
const maxMarkers = 1024

// New returns a Claimer on pool. It returns cfg's validation error.
func New(pool *pgxpool.Pool, cfg Config) (*Claimer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := sqlname.Quote(cfg.Table)
	col := sqlname.Column
	id, agg, typ, payload := col(cfg.Columns.ID), col(cfg.Columns.AggregateID), col(cfg.Columns.EventType), col(cfg.Columns.Payload)
	aggType := "NULL::text"
	if cfg.Columns.AggregateType != "" {
		aggType = "o." + col(cfg.Columns.AggregateType) + "::text"
	}
	guard := sqlname.OrderGuard(cfg.Table)
	c := &Claimer{cfg: cfg, pool: pool, holder: cfg.RelayID + "/" + randomHex(4), guard: guard}
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
	// Claims of all relays on one table serialize on a transaction-level
	// advisory lock keyed by the table's OID. Without it, two concurrent
	// claims could split one aggregate's consecutive events between two
	// relays (the second one skips the rows the first has locked but not
	// yet leased), which would let them be published out of order. The
	// lock lasts only the claim statement, a few milliseconds.
	c.lockSQL = `SELECT ` + sqlname.XactLock(sqlname.LockClaim, cfg.Table) + `, set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true)`
	// A claim that registers the relay in the order guard commits
	// synchronously: other relays skip the guard on the strength of that
	// row, so a database crash must not lose it while its leases survive.
	c.lockSyncSQL = `SELECT ` + sqlname.XactLock(sqlname.LockClaim, cfg.Table) + `, set_config('jit', 'off', true)`
	// One statement: a CTE picks and row-locks the candidates, the UPDATE
	// leases exactly those. Never `UPDATE ... WHERE id IN (SELECT ... LIMIT
	// n FOR UPDATE SKIP LOCKED)`: the planner may run that subquery more
	// than once and lease more than n rows (PostgreSQL bug #15715). The
	// UPDATE finds the locked rows by ctid (a TID scan, no index lookup);
	// the row lock guarantees the ctid does not change in between.
	//
	// The guard keeps per-aggregate order across relays and across retries:
	// a row is not claimable while an earlier unpublished row of its
	// aggregate is leased by another relay, or is backing off after a
	// failed publish (locked_by NULL, locked_until in the future). This
	// relay's own leases do not block it: it publishes its batches one after
	// the other, in seq order. The guard is a scalar subquery on purpose:
	// written as NOT EXISTS the planner turns it into an anti-join that
	// reads the whole table once per claim; as a correlated SubPlan it is
	// one probe of outbox_unpublished_aggregate_idx per candidate, which
	// stops at the first blocking row. JIT is off for the claim
	// (set_config above): the SubPlan's pessimistic cost estimate would
	// otherwise trigger JIT compilation, about 20ms per claim for nothing.
	st := NewStates(cfg.Table, cfg.Columns)
	c.claimSQL = `WITH candidates AS (
  SELECT o.ctid, o.locked_by IS NOT NULL AS taken_over FROM ` + t + ` o
  WHERE ` + st.Live("o") + `
    AND o.seq >= $5
    AND ` + st.LeaseFree("o") + `
    AND (NOT (SELECT EXISTS (SELECT 1 FROM ` + guard + ` g WHERE g.until > now() AND g.key <> 'relay:' || $3))
      OR NOT ` + st.Waiting("o", "$3", "$5") + `)
  ORDER BY o.seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), claimed AS (
UPDATE ` + t + ` o
SET locked_until = now() + $2 * interval '1 millisecond', locked_by = $3, claim_token = $4
WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM candidates))
RETURNING o.seq, o.` + id + `::text, o.` + agg + `::text, o.` + typ + `::text, o.` + payload + `, o.headers, o.topic, o.created_at, o.attempts, o.locked_until, ` + aggType + `
)
SELECT claimed.*, (SELECT count(*) FROM candidates WHERE taken_over) FROM claimed`
	// The floor: a seq below which every row is published. Published rows
	// leave the partial indexes only when VACUUM cleans them (and a large
	// table's autovacuum may skip index cleanup for a long time: PG 14+'s
	// INDEX_CLEANUP auto bypass), so an index scan from the start would
	// walk over every published row's dead entry, and each claim would get
	// slower as events are published. Claims start at the floor instead.
	// It moves only over published rows and over seqs that are final: a
	// marker records the identity's last value and then the virtual
	// transaction IDs of every transaction running in this database, and
	// counts once they have all ended (see marker). Transaction IDs alone
	// would not do: nextval does not give a transaction an xid, and a COPY
	// takes the seqs of up to 1,000 buffered rows before its first write,
	// a slow expression in an INSERT runs after its nextval; the floor
	// then passed rows that committed later, and later events of their
	// aggregates went out before them. Every virtual transaction ID is
	// visible in pg_locks (each transaction holds an exclusive lock on its
	// own, as CREATE INDEX CONCURRENTLY relies on), to any role;
	// autovacuum workers (which insert nothing, and may run for minutes)
	// and WAL senders are left out where the role may see backend_type
	// (pg_read_all_stats; to other roles it is NULL and they count). A
	// sequence with CACHE > 1 hands out values long after it took them
	// from the sequence, in later transactions: then the floor stays at 0.
	// Every rescanEvery a claim scans from seq 0 all the same.
	seqName := `pg_get_serial_sequence('` + strings.ReplaceAll(t, `'`, `''`) + `', 'seq')::regclass`
	c.advanceSeqSQL = `SELECT coalesce(pg_sequence_last_value(` + seqName + `), 0),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = ` + seqName + `)`
	c.advanceVXIDSQL = `SELECT coalesce(array_agg(l.virtualxid ORDER BY l.virtualxid), '{}')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted
  AND l.pid <> pg_backend_pid() AND a.datname = current_database()
  AND coalesce(a.backend_type, '') NOT IN ('autovacuum worker', 'autovacuum launcher', 'walsender')`
	c.advanceSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
  pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
  (SELECT min(seq) FROM ` + t + ` WHERE published_at IS NULL AND seq >= $1)`
	// Rows are named by seq, whatever the type of the event ID column
	// (uuid, text, bigint): bigint[] travels in every pgx query exec mode,
	// and outbox_unpublished_seq_idx finds them.
	c.markSQL = `UPDATE ` + t + `
SET published_at = now(), locked_until = NULL, last_error = NULL
WHERE seq = ANY($1::bigint[]) AND claim_token = $2::uuid AND published_at IS NULL`
	c.extendSQL = `UPDATE ` + t + `
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE seq = ANY($1::bigint[]) AND claim_token = $2::uuid AND published_at IS NULL
RETURNING seq`
	c.releaseSQL = `UPDATE ` + t + `
SET locked_until = CASE WHEN $3::bigint > 0 THEN now() + $3::bigint * interval '1 millisecond' END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + $4::int, last_error = COALESCE($5::text, last_error)
WHERE seq = ANY($1::bigint[]) AND claim_token = $2::uuid AND published_at IS NULL`
	c.deadSQL = `UPDATE ` + t + `
SET dead_lettered_at = now(),
    locked_until = CASE WHEN $3::bool THEN 'infinity'::timestamptz END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + $4::int, last_error = $5::text
WHERE seq = ANY($1::bigint[]) AND claim_token = $2::uuid AND published_at IS NULL`
	c.requeueSQL = `UPDATE ` + t + `
SET dead_lettered_at = NULL, locked_until = NULL, attempts = 0
WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL AND ($1::text[] IS NULL OR ` + id + `::text = ANY($1::text[]))`
	return c, nil
}

// Settle says what happens to rows a claim still holds and that were not
// published: Release gives them back, DeadLetter parks them.
type Settle struct {
	// Token is the claim that leased the rows (Batch.Token): rows whose
	// lease passed to another claim since are left alone.
	Token uuid.UUID
	// Seqs names the rows (Row.Seq).
	Seqs []int64
	// RetryIn, for Release: > 0 keeps the rows, and every later event of
	// their aggregates, unclaimable for this long (a failed publish backs
	// off); 0 makes them claimable at once. Milliseconds are kept.
	RetryIn time.Duration
	// Hold, for DeadLetter: the rows keep every later event of their
	// aggregates back until they are requeued (locked_until 'infinity';
	// relay.DeadLetterHold). Without it, later events go on.
	Hold bool
	// CountAttempt adds one to the rows' attempts (a publish the broker
	// answered with an error; an outage does not count).
	CountAttempt bool
	// LastError, if not empty, replaces last_error (DeadLetter always sets
	// it).
	LastError string
}

// DeadLetter parks the rows of s still held by s.Token: they stay in the
// table, unpublished, with dead_lettered_at set, attempts increased by
// s.CountAttempt and last_error set to s.LastError, and are not claimed
// again until Requeue. With s.Hold, their locked_until becomes 'infinity',
// which also holds back every later event of their aggregates (order is
// kept); without it, later events go on. It returns how many rows it
// parked. Errors are wrapped as "dead-letter: ...".
func (c *Claimer) DeadLetter(ctx context.Context, s Settle) (int64, error) {
	if len(s.Seqs) == 0 {
		return 0, nil
	}
	b := &pgx.Batch{}
	b.Queue(c.deadSQL, s.Seqs, s.Token, s.Hold, attemptInc(s.CountAttempt), s.LastError)
	if s.Hold {
		b.Queue(c.holdSQL, nil)
	}
	n, err := c.execBatch(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("dead-letter: %w", err)
	}
	return n, nil
}

func attemptInc(count bool) int {
	if count {
		return 1
	}
	return 0
}

// Requeue makes dead-lettered events claimable again with attempts reset
// to 0 (last_error is kept for the record): the events whose ID, as text,
// is one of ids, or every dead letter when ids is nil. Held-back later events of their aggregates
// follow them in order. It returns how many events it requeued. Errors are
// wrapped as "requeue: ...".
func (c *Claimer) Requeue(ctx context.Context, ids []string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// Serialize with releases and dead-letterings, which extend
		// 'holds' in their own transactions.
		if _, err := tx.Exec(ctx, c.holdSQL, nil); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, c.requeueSQL, ids)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		// 'holds' now only needs to cover what still backs off or is held.
		_, err = tx.Exec(ctx, `UPDATE `+c.guard+` SET until = coalesce((
  SELECT max(locked_until) FROM `+c.table()+`
  WHERE published_at IS NULL AND locked_by IS NULL AND locked_until > now()), '-infinity')
WHERE key = 'holds'`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	return n, nil
}

// table returns the quoted outbox table name.
func (c *Claimer) table() string {
	return sqlname.Quote(c.cfg.Table)
}

// execBatch runs b in one implicit transaction and returns the rows
// affected by its first statement.
func (c *Claimer) execBatch(ctx context.Context, b *pgx.Batch) (int64, error) {
	br := c.pool.SendBatch(ctx, b)
	defer br.Close()
	tag, err := br.Exec()
	if err != nil {
		return 0, err
	}
	for i := 1; i < b.Len(); i++ {
		if _, err := br.Exec(); err != nil {
			return 0, err
		}
	}
	if err := br.Close(); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// Holder is the value this Claimer writes to locked_by: Config.RelayID
// plus a per-instance suffix.
func (c *Claimer) Holder() string { return c.holder }

// Close tells other relays that this one holds no more leases, so their
// claims can skip the order guard again. Call it after every batch was
// marked or released; it does nothing while rows are still leased by this
// Claimer. Errors are wrapped as "close claimer: ...".
func (c *Claimer) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastBeat = time.Time{} // a later claim registers again
	_, err := c.pool.Exec(ctx, `DELETE FROM `+c.guard+` WHERE key = 'relay:' || $1
AND NOT EXISTS (SELECT 1 FROM `+c.table()+` WHERE locked_by = $1 AND published_at IS NULL AND locked_until > now())`, c.holder)
	if err != nil {
		return fmt.Errorf("close claimer: %w", err)
	}
	return nil
}

// Config returns the Claimer's configuration with defaults applied.
func (c *Claimer) Config() Config { return c.cfg }

// Claim leases up to Config.BatchSize claimable rows for Config.Lease and
// returns them ordered by seq. An empty batch (no rows) is not an error.
// Errors are wrapped as "claim batch: ...": see IsMissingTable.
func (c *Claimer) Claim(ctx context.Context) (*Batch, error) {
	token := uuid.Must(uuid.NewV7())
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &pgx.Batch{}
	began := time.Now()
	beat := c.lastBeat.IsZero() || began.Sub(c.lastBeat) >= c.cfg.Lease/2
	if beat {
		b.Queue(c.lockSyncSQL)
		b.Queue(c.beatSQL, c.holder, c.cfg.Lease.Milliseconds())
		// Dead relays' entries are swept as rarely as this relay beats.
		b.Queue(c.sweepSQL)
	} else {
		b.Queue(c.lockSQL)
	}
	// Now and then a claim scans from the start instead of the floor, so a
	// row the floor passed by mistake waits at most rescanEvery (see
	// advance for how that can happen).
	floor := c.floor
	if began.Sub(c.lastRescan) >= rescanEvery {
		floor = 0
	}
	b.Queue(c.claimSQL, c.cfg.BatchSize, c.cfg.Lease.Milliseconds(), c.holder, token, floor)
	advance := time.Since(c.lastAdvance) >= advanceEvery
	if advance {
		// In this order: the sequence before the transactions running
		// (a transaction that took a seq before the first read has
		// ended or is among them), the snapshot after both.
		b.Queue(c.advanceSeqSQL)
		b.Queue(c.advanceVXIDSQL)
		b.Queue(c.advanceSQL, c.floor)
	}
	// The statements run in one implicit transaction, in one round trip;
	// it commits when the batch completes, releasing the advisory lock.
	br := c.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	if beat {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("claim batch: %w", err)
		}
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("claim batch: sweep order guard: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	batch := &Batch{Token: token}
	var headers []byte
	var topic, aggType *string
	for rows.Next() {
		var r Row
		// Payload scans straight into a fresh []byte (nil for SQL NULL).
		if err := rows.Scan(&r.Seq, &r.ID, &r.AggregateID, &r.EventType, &r.Payload, &headers, &topic, &r.CreatedAt, &r.Attempts, &batch.LockedUntil, &aggType, &batch.TakenOver); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		if topic != nil {
			r.Topic = *topic
		}
		if aggType != nil {
			r.AggregateType = *aggType
		}
		if len(headers) > 0 && string(headers) != "null" {
			if r.Headers, err = decodeHeaderJSON(headers); err != nil {
				// Written by plain SQL before the headers CHECK constraint
				// (or on an adopted table): this row alone is parked.
				r.DecodeErr = fmt.Errorf("headers %.64s: %w", headers, err)
			}
		}
		batch.Rows = append(batch.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	if advance {
		var seq, xmin, xmax int64
		var cache *int64
		var vxids []string
		var minUnpublished *int64
		if err := br.QueryRow().Scan(&seq, &cache); err != nil {
			return nil, fmt.Errorf("claim batch: advance floor: sequence: %w", err)
		}
		if err := br.QueryRow().Scan(&vxids); err != nil {
			return nil, fmt.Errorf("claim batch: advance floor: transactions: %w", err)
		}
		if err := br.QueryRow().Scan(&xmin, &xmax, &minUnpublished); err != nil {
			return nil, fmt.Errorf("claim batch: advance floor: %w", err)
		}
		if cache == nil || *cache == 1 {
			c.advance(seq, vxids, xmin, xmax, minUnpublished)
		}
		c.lastAdvance = time.Now()
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("claim batch: commit: %w", err)
	}
	if beat {
		c.lastBeat = began
	}
	if floor == 0 {
		c.lastRescan = began
	}
	batch.Claimed = time.Now()
	// RETURNING is not ordered; the relay needs seq order.
	slices.SortFunc(batch.Rows, func(a, b Row) int { return cmp.Compare(a.Seq, b.Seq) })
	return batch, nil
}

// advance records a new marker (seq and the running transactions' vxids),
// moves pending markers along their phases given the transactions running
// now (vxids) and the snapshot's xmin and xmax, and moves the floor up to
// the highest settled marker, but never past an unpublished row.
func (c *Claimer) advance(seq int64, vxids []string, xmin, xmax int64, minUnpublished *int64) {
	running := make(map[string]struct{}, len(vxids))
	for _, v := range vxids {
		running[v] = struct{}{}
	}
	settled := int64(-1)
	i := 0
markers:
	for ; i < len(c.markers); i++ {
		m := &c.markers[i]
		if m.xmax == 0 {
			for _, v := range m.vxids {
				if _, ok := running[v]; ok {
					break markers
				}
			}
			// Phase 2: wait for the xids below the current xmax (a
			// prepared transaction among the vxids keeps its xid).
			m.vxids, m.xmax = nil, xmax
		}
		if m.xmax > xmin {
			break
		}
		settled = m.seq
	}
	c.markers = c.markers[i:]
	if len(c.markers) < maxMarkers && seq > 0 {
		c.markers = append(c.markers, marker{seq: seq, vxids: vxids})
	}
	if settled < 0 {
		return
	}
	next := settled + 1
	if minUnpublished != nil && *minUnpublished < next {
		next = *minUnpublished
	}
	if next > c.floor {
		c.floor = next
	}
}

// Floor returns the seq below which this Claimer knows every row is
// published; its claims scan from there.
func (c *Claimer) Floor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.floor
}

// MarkPublished sets published_at on the rows seqs that are still held by
// token, and returns how many it marked. Rows whose lease passed to
// another claim are left alone (fewer than len(seqs) are marked; not an
// error: those events will be published again, which at-least-once allows).
// Errors are wrapped as "mark published: ...".
func (c *Claimer) MarkPublished(ctx context.Context, token uuid.UUID, seqs []int64) (int64, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	b := &pgx.Batch{}
	b.Queue(asyncCommitSQL)
	b.Queue(c.markSQL, seqs, token)
	br := c.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, fmt.Errorf("mark published: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, fmt.Errorf("mark published: %w", err)
	}
	if err := br.Close(); err != nil {
		return 0, fmt.Errorf("mark published: commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Extend renews the lease of the rows seqs still held by token to
// Config.Lease from now (database clock), and returns the seqs it renewed:
// rows whose lease passed to another claim meanwhile are missing, and must
// not be published by this claim's holder any more. The relay extends a
// batch that waited behind a slow publish before it publishes it. Errors
// are wrapped as "extend lease: ...".
func (c *Claimer) Extend(ctx context.Context, token uuid.UUID, seqs []int64) ([]int64, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	b.Queue(asyncCommitSQL)
	b.Queue(c.extendSQL, seqs, token, c.cfg.Lease.Milliseconds())
	br := c.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("extend lease: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("extend lease: %w", err)
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("extend lease: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("extend lease: commit: %w", err)
	}
	return kept, nil
}

// asyncCommitSQL turns off synchronous_commit for the rest of the
// (implicit) transaction. Claims and marks commit without waiting for
// their WAL flush: they become visible at once, and a database crash can
// only lose the last few hundred milliseconds of them, which returns those
// rows to "unclaimed" or "unpublished" — they are published again, which
// at-least-once delivery allows. It takes a WAL flush (about 1ms here) off
// every claim, which is on the path of every event's commit-to-publish
// latency. The writer's transactions are untouched: they commit with the
// application's own setting.
const asyncCommitSQL = "SELECT set_config('synchronous_commit', 'off', true)"

// Release gives the rows of s still held by s.Token back: claimable at
// once, or after s.RetryIn, during which every later event of their
// aggregates waits too (a failed publish backs off); attempts grow by
// s.CountAttempt and s.LastError, if not empty, replaces last_error. It
// returns how many rows it released. Errors are wrapped as "release: ...".
func (c *Claimer) Release(ctx context.Context, s Settle) (int64, error) {
	if len(s.Seqs) == 0 {
		return 0, nil
	}
	var le *string
	if s.LastError != "" {
		le = &s.LastError
	}
	b := &pgx.Batch{}
	b.Queue(c.releaseSQL, s.Seqs, s.Token, s.RetryIn.Milliseconds(), attemptInc(s.CountAttempt), le)
	if s.RetryIn > 0 {
		b.Queue(c.holdSQL, s.RetryIn.Milliseconds())
	}
	n, err := c.execBatch(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
}

// IsMissingTable reports whether err comes from a missing outbox table
// (SQLSTATE 42P01 undefined_table): run `outbox-relay migrate`.
func IsMissingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable
}

// IsSchemaMismatch reports whether err comes from a table whose shape is
// not the outbox's (SQLSTATE 42703 undefined_column, 42804 datatype
// mismatch): a column is missing or has the wrong type.
func IsSchemaMismatch(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UndefinedColumn || pgErr.Code == pgerrcode.DatatypeMismatch)
}

// DefaultRelayID returns "<hostname>-<8 hex digits>", unique per process:
// Config.RelayID's default.
func DefaultRelayID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return host + "-" + randomHex(4)
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
