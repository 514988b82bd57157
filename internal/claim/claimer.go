// Package claim is the relay's claimer: it claims batches of outbox rows
// for one relay, marks them published and releases them, with all lease
// arithmetic done by the database clock.
//
// A claim is one short transaction: it takes the lowest-seq claimable rows
// of the key partitions this relay owns (owner.go: several relays on one
// table share the partitions, as Kafka consumers share a topic's), skipping
// rows whose aggregate has an earlier event that is backing off, held as a
// dead letter, or leased under an earlier holder, sets locked_until = now()
// + lease and a fresh claim token, and commits at once. Kafka is never
// called inside it. MarkPublished and Release are fenced by the claim token:
// once a lease expired and another relay re-claimed the rows, the first
// holder's late mark or release changes nothing. The statements are
// sql/*.sql, rendered once per Claimer (render.go). Its configuration is
// lease.Config.
package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqlname"
	"github.com/pgoutbox/outbox/lease"
)

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
	// KeyPartition is the row's key partition (outbox.KeyPartition of its
	// aggregate ID).
	KeyPartition int
	// DecodeErr is set when the row cannot become a Kafka record (its
	// headers are not a JSON object, or its payload is larger than
	// Config.MaxBatchBytes: ErrPayloadTooLarge, Payload nil): the relay
	// dead-letters it at once with this reason. The other fields are
	// still filled in.
	DecodeErr error
	// Unread is set, with Payload nil, when the claim did not keep this
	// row's payload: the payloads read before it (as printed) already came
	// to Config.MaxBatchBytes and a quarter. The claim bounds its bytes by payload_size,
	// jsonb's stored size, and some JSON prints back far larger than it
	// is stored (a number such as 1e131000 takes a few bytes stored and
	// 131,001 printed; a control character 1 and 6), so reading stops
	// keeping payloads at the bound instead: the relay's memory stays
	// bounded whatever the payloads. The relay gives an unread row back
	// unpublished, without counting an attempt, and holds its aggregate's
	// later rows back with it; a later claim reads it. At least one row of
	// a batch is always read.
	Unread bool
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
	// Lease it gives a local deadline that is safe against clock skew
	// because it only measures elapsed time.
	Claimed time.Time
	// Lease is how long the claim leased the rows for: Config.Lease, or
	// less when the relay's membership ends sooner (a lease never
	// outlives it, see Ownership). 0 for an empty batch.
	Lease time.Duration
	// WokeOwners counts the key partitions of other relays in which a
	// shared poll (Claimer.PollShared) found claimable rows and whose
	// owners it notified; 0 for any other claim.
	WokeOwners int
	// More says claim again at once, as after a batch of BatchSize rows:
	// the claim stopped at Config.MaxBatchBytes with claimable rows left,
	// or the relays' members or owners changed since this Claimer last
	// rebalanced (its next claim rebalances first).
	More bool
}

// Deadline is the local time (monotonic clock) by which the batch must be
// published and marked before its lease may pass to another relay:
// Claimed plus the shorter of lease and the batch's own Lease.
func (b *Batch) Deadline(lease time.Duration) time.Time {
	if b.Lease > 0 && b.Lease < lease {
		lease = b.Lease
	}
	return b.Claimed.Add(lease)
}

// Claimer claims, marks and releases outbox rows through a pool.
type Claimer struct {
	cfg    lease.Config
	pool   *pgxpool.Pool
	holder atomicString // locked_by of this Claimer's claims; changes after a failed claim
	// st are the Claimer's statements, rendered by New; rows are those
	// naming rows by address for the table as it is: st.plainRows from
	// New, st.partitionedRows once prepared finds the table partitioned.
	st        *statements
	rows      *rowStatements
	addrKnown atomic.Bool // prepared found out whether the table is partitioned
	prepMu    sync.Mutex  // serializes prepared

	// mu is held by each claim for its round trip; it guards fl, own,
	// lastBeat, rowCap and stuckUntil.
	mu       sync.Mutex
	fl       floor     // where claims scan from (floor.go)
	own      *owner    // key partitions owned (owner.go)
	lastBeat time.Time // when the last registry write was sent
	// rowCap, when above 0, caps a claim's rows below Config.BatchSize
	// after a claim left payloads unread (Row.Unread): what it could read,
	// doubled back at each claim that read everything.
	rowCap int
	// rewind, set by every statement that gives rows back, makes the next
	// claim scan from the floor; stuckUntil is when the leases of rows the
	// relay could not give back end at the latest (Settled).
	rewind     atomic.Bool
	stuckUntil time.Time
	// heldSeen: the last claim's Holds read said a dead letter may be
	// held, so the next claim probes the order guard by rows
	// (rowStatements.claimHeld). Guarded by mu. heldNow, set by a
	// dead-lettering with Hold, sets it before the next claim.
	heldSeen bool
	heldNow  atomic.Bool
	// pollShared makes the next claim a shared poll (PollShared).
	pollShared atomic.Bool
	// settled are the calls of Settled not applied yet (applySettled).
	settled settleQueue
	// pres is a static member's presence (presence.go); nil without one.
	pres *presence
	// fencer fences former owners (SetFencer); nil fences nothing.
	fencer Fencer
	// created bounds the marks on a time-partitioned table (created.go).
	created createdRanges
}

// New returns a Claimer on pool. It returns cfg's validation error, or an
// error rendering its statements (a defect of the package, which its
// tests catch).
func New(pool *pgxpool.Pool, cfg lease.Config) (*Claimer, error) {
	static := cfg.RelayID != ""
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := newStatements(cfg)
	if err != nil {
		return nil, err
	}
	c := &Claimer{cfg: cfg, pool: pool, st: st, rows: st.plainRows, fl: floor{final: -1}}
	inc := cfg.RelayID + "/" + config.RandomHex(4)
	if static {
		// Static membership: the member is the relay ID, the same in
		// every incarnation (so it owns the same partitions), and
		// locked_by names the incarnation (owner.go).
		c.own = newOwner(cfg.RelayID)
		c.own.static, c.own.memberKey = true, "pgoutbox member "+cfg.Table+" "+cfg.RelayID
	} else {
		c.own = newOwner(inc)
	}
	c.own.incarnation = inc
	c.holder.Store(inc)
	return c, nil
}

// prepared makes sure that the statements naming rows by address are
// those for the table as it is: New takes those of a plain table; the
// first call asks the database, once per Claimer, whether the table is
// partitioned (PARTITION BY, e.g. sql.MigrateOptions.TimePartitions), and
// if so takes those naming rows by (tableoid, ctid) (see
// sqlname.RowAddress). Claim and every statement that settles rows call it
// first; until it succeeds (a missing table: an error IsMissingTable
// reports) it asks again at the next call. A table changed between plain
// and partitioned under a running relay is not followed: restart it.
func (c *Claimer) prepared(ctx context.Context) error {
	if c.addrKnown.Load() {
		return nil
	}
	c.prepMu.Lock()
	defer c.prepMu.Unlock()
	if c.addrKnown.Load() {
		return nil
	}
	var partitioned bool
	q := c.st.partitioned
	if err := c.pool.QueryRow(ctx, q.SQL, q.Args(tableArgs{Table: sqlname.Quote(c.cfg.Table)})...).Scan(&partitioned); err != nil {
		return err
	}
	if partitioned {
		c.rows = c.st.partitionedRows
	}
	c.addrKnown.Store(true)
	return nil
}

// Holder is the value this Claimer writes to locked_by: its Member, and
// after each failed claim its Member plus ".<n>", a new one each time (see
// Claim).
func (c *Claimer) Holder() string { return c.holder.Load() }

// atomicString is a string read and written atomically.
type atomicString struct{ v atomic.Pointer[string] }

func (a *atomicString) Load() string {
	if p := a.v.Load(); p != nil {
		return *p
	}
	return ""
}

func (a *atomicString) Store(s string) { a.v.Store(&s) }

// Close gives this relay's key partitions back and leaves the table's
// relays, so that the others take its partitions at once (a partition of
// which a batch is still unsettled, see Settled, is kept until this
// member's membership runs out), and tells relays of older versions that
// this one holds no more leases. Call it after every batch was marked or
// released. A later claim joins again. Errors are wrapped as "close
// claimer: ...".
func (c *Claimer) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applySettled()
	c.lastBeat = time.Time{} // a later claim registers again
	if err := c.leave(ctx); err != nil {
		return fmt.Errorf("close claimer: %w", err)
	}
	if c.pres != nil {
		c.pres.stop()
		q := c.st.undeclare
		if _, err := c.pool.Exec(ctx, q.SQL, q.Args(incarnationArgs{Incarnation: c.own.incarnation})...); err != nil {
			return fmt.Errorf("close claimer: %w", err)
		}
	}
	q := c.st.unregister
	if _, err := c.pool.Exec(ctx, q.SQL, q.Args(holderArgs{Holder: c.holder.Load()})...); err != nil {
		return fmt.Errorf("close claimer: %w", err)
	}
	return nil
}

// Config returns the Claimer's configuration with defaults applied.
func (c *Claimer) Config() lease.Config { return c.cfg }

// ErrNotMigrated is wrapped by claims on a table that migration 00009
// (key partitions) has not reached or whose backfill has not finished:
// run `outbox-relay migrate`.
var ErrNotMigrated = fmt.Errorf("the outbox table has no key partitions yet: run `outbox-relay migrate` (it adds them and fills them in)")

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
