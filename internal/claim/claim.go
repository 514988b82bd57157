package claim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// Claim leases up to Config.BatchSize claimable rows for Config.Lease and
// returns them ordered by seq, taking rows while the payload bytes before
// each stay under Config.MaxBatchBytes (so at least one row, whatever its
// size; Batch.More says when that bound left claimable rows behind). An
// empty batch (no rows) is not an error.
// In the same transaction, before the claim, it marks published the rows
// of each of marks still held by its token, and sets its Marked (see
// MarkPublished): a relay that claims often saves a transaction per batch.
// Errors are wrapped as "claim batch: ...": see IsMissingTable.
//
// An error does not say that nothing was claimed: the server may have
// committed the claim and its marks before the error (a connection lost
// after the commit, a deadline passed while the answer was on its way, a
// row the client cannot decode). Rows claimed so are leased under a token
// nobody knows until their lease ends. The Claimer's own leases do not
// block its claims (its relay publishes them in order), so after any error
// it takes a new holder (Holder): those rows then block the later events
// of their aggregates like another relay's leases do, and are taken over
// when their lease ends. Without that, an aggregate's next event could be
// claimed and published before them.
//
// Before it claims it rebalances when due (owner.go): at the first claim,
// after another relay joined, left or moved partitions, when a member's
// membership ran out, when a partition being given back became idle, and
// every sixth of a lease to renew this relay's membership. A claim takes
// rows of the partitions this relay owns only; while a relay of an older
// version holds leases on the table (Ownership.Legacy) it claims nothing.
// Call Settled with the batch's token once every row of it is published,
// given back or dead-lettered: until then the Claimer does not hand its
// partitions over to another relay (relay.Relay does this for you).
func (c *Claimer) Claim(ctx context.Context, marks ...*Mark) (*Batch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applySettled()
	if err := c.prepared(ctx); err != nil {
		if IsMissingTable(err) {
			return nil, fmt.Errorf("rebalance: %w: %w", ErrNotMigrated, err)
		}
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	c.pres.start(c)
	now := time.Now()
	if c.own.rebalanceDue(now, c.cfg.Lease) {
		// Only a renewal of a membership that cannot have lapsed (renewed
		// within half a lease, nothing else changed) that adds no
		// partition to the claim keeps the resume point: partitions
		// acquired bring rows below it, and a relay paused past its
		// membership may have dropped rows it had claimed.
		o := c.own
		renewal := o.joined && !o.expired && o.seenGen == o.generation && now.Sub(o.renewed) < c.cfg.Lease/2
		before := slices.Clone(o.claimMask)
		err := c.rebalance(ctx, now)
		if err != nil || !renewal || claimsMore(before, o.claimMask) {
			c.fl.resume.reset()
		}
		if err != nil {
			return nil, err
		}
	}
	b, err := c.claim(ctx, marks)
	if err != nil {
		c.newHolder(now)
		return b, err
	}
	c.own.track(b)
	return b, err
}

// claimsMore reports whether claim mask after has a partition that before
// has not.
func claimsMore(before, after []bool) bool {
	for p, in := range after {
		if in && (p >= len(before) || !before[p]) {
			return true
		}
	}
	return false
}

// PollShared makes the next Claim a shared poll as well: besides this
// relay's rows, it looks at the claimable rows of every key partition
// (the first Config.BatchSize from the floor, in seq order) and notifies
// the wake channel (SetWakeChannel) naming the partitions of other
// relays among them (config.PollWakePrefix), so that their owners claim
// them; Batch.WokeOwners counts those. Relays that poll in turn
// (Ownership.Turn) thus poll the table once per poll interval between
// them, however many they are. Without a wake channel, or while this
// relay is the only member, the claim is a plain one. Safe for
// concurrent use.
func (c *Claimer) PollShared() { c.pollShared.Store(true) }

// newHolder makes the Claimer write a new locked_by value from now on
// (its Member and a new suffix), registered in the order guard by its next
// claim; the old one stays registered until it expires. The old holder's
// leases, if the failed claim committed, last until a lease from now at
// the latest: until then the guard respects them and the partitions stay
// with this relay. Called with c.mu held.
func (c *Claimer) newHolder(now time.Time) {
	c.own.lostClaim(c.holder.Load(), now.Add(c.cfg.Lease+time.Second))
	c.own.holders++
	c.holder.Store(c.own.incarnation + "." + strconv.Itoa(c.own.holders))
	c.lastBeat = time.Time{}
	c.fl.resume.reset()
}

// claim is Claim with c.mu held.
func (c *Claimer) claim(ctx context.Context, marks []*Mark) (*Batch, error) {
	token := uuid.Must(uuid.NewV7())
	began := time.Now()
	q := c.queueClaim(began, token, marks)
	if err := q.steps.send(ctx, c.pool, "claim batch: commit"); err != nil {
		return nil, err
	}
	if q.beat {
		c.lastBeat = began
		if q.declared {
			c.pres.declared.Store(true)
		}
	}
	batch := q.batch
	batch.Claimed = time.Now()
	batch.WokeOwners = q.woke
	// RETURNING is not ordered; the relay needs seq order.
	slices.SortFunc(batch.Rows, func(a, b Row) int { return cmp.Compare(a.Seq, b.Seq) })
	var last int64
	if len(batch.Rows) > 0 {
		last = batch.Rows[len(batch.Rows)-1].Seq
	}
	c.capRows(batch)
	if c.rows == c.st.partitionedRows {
		c.created.put(batch.Token, batch.Rows)
	}
	q.scan.full = len(batch.Rows) >= q.limit || batch.More
	q.scan.fromFloor, q.scan.took = q.floor <= c.fl.at, batch.Claimed.Sub(began)
	c.fl.resume.claimed(last, q.scan, batch.Claimed)
	if c.own.seenGen != c.own.generation {
		// Members or owners changed since the last rebalance, so the
		// claim may have taken nothing it could have: claim again at
		// once, rebalancing first.
		batch.More = true
	}
	return batch, nil
}

// capRows sets the next claims' row cap from batch: after payloads were
// left unread, the number read (so the next claim reads what it takes,
// instead of reading again payloads it cannot keep), and batch.More, since
// the unread rows are claimable again at once; after a claim that read
// everything, twice the cap, until it reaches Config.BatchSize.
func (c *Claimer) capRows(batch *Batch) {
	read, unread := 0, 0
	for i := range batch.Rows {
		if batch.Rows[i].Unread {
			unread++
		} else {
			read++
		}
	}
	switch {
	case unread > 0:
		c.rowCap, batch.More = max(read, 1), true
	case c.rowCap > 0:
		if c.rowCap *= 2; c.rowCap >= c.cfg.BatchSize {
			c.rowCap = 0
		}
	}
}

// claimQueue is one claim's statements and what they do besides claiming.
type claimQueue struct {
	steps steps
	batch *Batch // filled in by the claim's step
	beat  bool   // the relay's order-guard registration is written
	floor int64  // the seq the claim scans from
	// scan is what decides where the next claim scans from (resume):
	// quiet and final are set before the claim, the entries of the order
	// guard by it (holds.SQL), the rest after it.
	scan     scanState
	limit    int  // the claim's row limit (lease.Config.BatchSize or rowCap)
	declared bool // the claim declares the presence (presence.go)
	woke     int  // partitions whose owners a shared poll notified (WakeOwners)
}

// queueClaim queues one claim's statements: the plan settings (and the
// order-guard registration every half lease), the marks, the claim, the
// generation, and the floor's reads every advanceEvery. Claims of relays
// on one table do not wait for each other (no lock): each takes rows of
// the key partitions it owns only (owner.go), so no two claims can split
// one aggregate's consecutive events.
func (c *Claimer) queueClaim(began time.Time, token uuid.UUID, marks []*Mark) *claimQueue {
	guardKeys := c.own.guardKeys(began)
	q := &claimQueue{scan: scanState{final: c.fl.final, quiet: len(guardKeys) == 0 && !began.Before(c.stuckUntil)}}
	if c.rewind.Swap(false) || !q.scan.quiet || c.fl.noResume {
		c.fl.resume.reset()
	}
	q.floor = c.fl.resume.from(c.fl.at)
	defer func() { c.fl.scanFrom = q.floor }()
	st, rows := c.st, c.rows
	q.beat = c.lastBeat.IsZero() || began.Sub(c.lastBeat) >= c.cfg.Lease/2 || c.pres.due()
	if q.beat {
		// A claim that registers the relay commits synchronously (plan.SQL).
		q.steps.exec(st.plan.SQL, nil, "claim batch", nil)
		q.steps.exec(st.beat.SQL, st.beat.Args(beatArgs{Holder: c.holder.Load(), LeaseMS: c.cfg.Lease.Milliseconds()}), "claim batch", nil)
		// Dead relays' entries are swept as rarely as this relay beats.
		q.steps.exec(st.sweep.SQL, nil, "claim batch", nil)
	} else {
		q.steps.exec(st.asyncCommit.SQL, nil, "claim batch", nil)
	}
	for _, m := range marks {
		q.steps.exec(rows.mark.SQL, rows.mark.Args(c.created.args(m.Token, m.Seqs)), "claim batch: mark published",
			func(tag pgconn.CommandTag) { m.Marked = tag.RowsAffected() })
	}
	// Now and then a claim scans from the start instead of the floor, so a
	// row the floor passed by mistake waits at most rescanEvery (see
	// advance for how that can happen).
	if began.Sub(c.fl.lastRescan) >= rescanEvery {
		q.floor = 0
		c.fl.resume.reset()
		// Counted when tried, not when it succeeds: a rescan that fails
		// (it walks every dead index entry below the floor, and may pass
		// the statement timeout) must not turn every claim into one.
		c.fl.lastRescan = began
	}
	// The order guard looks for blocking rows from the floor up, even in a
	// rescan (claim_guard_from.SQL): below the floor every row is
	// published (a row the floor passed by mistake is claimed by the
	// rescan itself, before the later rows of its batch).
	// A relay of an older version that claims on this table makes this
	// claim take nothing (the rebalances watch for it to go).
	a := claimArgs{LeaseMS: c.cfg.Lease.Milliseconds(), Holder: c.holder.Load(), Token: token, ScanFrom: q.floor, Floor: c.fl.at, Requeued: c.fl.resume.requeued,
		Member: c.own.member, Owned: []bool{}, Generation: c.own.generation, ForceGuard: true, MaxBytes: int32(c.cfg.MaxBatchBytes)}
	q.limit = c.cfg.BatchSize
	if c.rowCap > 0 {
		q.limit = min(q.limit, c.rowCap)
	}
	if c.own.legacy == "" && !c.own.replaced {
		// A guarded resume point needs the order guard, even if 'holds'
		// ended since the last claim (resume).
		a.BatchSize, a.ForceGuard = q.limit, len(guardKeys) > 0 || c.fl.resume.guarded
		a.Owned, a.OwnsAny = c.own.claimMask, c.own.claimsAny
	}
	if c.own.static {
		a.Started = c.own.started.Load()
		if !c.own.replaced {
			// A takeover (LockMember) waits for this claim, and this claim
			// for a takeover in progress: it then finds its row taken.
			q.steps.exec(st.memberShared.SQL, st.memberShared.Args(keyArgs{Key: c.own.memberKey}), "claim batch: member lock", nil)
		}
	}
	if q.beat && c.pres.declaring() {
		q.declared = true
		q.steps.exec(st.declare.SQL, st.declare.Args(declareArgs{Incarnation: c.own.incarnation, LeaseMS: c.cfg.Lease.Milliseconds()}), "claim batch: presence", nil)
	}
	q.steps.scan(st.holds.SQL, nil, "claim batch: holds", &q.scan.holds, &q.scan.backoff, &q.scan.requeued, &c.heldSeen)
	claim := rows.claim
	if c.heldNow.Swap(false) || c.heldSeen {
		claim = rows.claimHeld
	}
	q.steps.add(claim.SQL, claim.Args(a), func(br pgx.BatchResults) (err error) {
		q.batch, err = readClaimed(br, token, c.cfg.MaxBatchBytes)
		return err
	})
	c.queueWakeOwners(q)
	q.steps.scan(st.generation.SQL, nil, "claim batch: ownership", &c.own.seenGen, &c.own.expired)
	if time.Since(c.fl.lastAdvance) >= advanceEvery {
		c.queueAdvance(&q.steps)
	}
	return q
}

// queueWakeOwners queues a shared poll's notification of the other
// owners (PollShared) when one is due: there is a wake channel and
// another member.
func (c *Claimer) queueWakeOwners(q *claimQueue) {
	if !c.pollShared.Swap(false) || c.own.channel == "" || c.own.members < 2 {
		return
	}
	mine := []bool{}
	if m := c.own.wakeMask.Load(); m != nil {
		mine = *m
	}
	st := c.st.wakeOwners
	q.steps.scan(st.SQL, st.Args(wakeOwnersArgs{ScanLimit: wakeScanRows * int64(c.cfg.BatchSize), Mine: mine,
		Channel: c.own.channel, Named: config.PollWakePrefix + config.KeyPartitionsPrefix, NamedAll: config.PollWakePrefix,
		MaxNamed: config.MaxKeyPartitionsNamed}), "claim batch: wake owners", &q.woke)
}

// wakeScanRows is how many batches' worth of rows a shared poll walks
// at most (WakeOwners' @scan_limit): enough to see past a few hundred rows
// held behind a dead letter, few enough that a poll stays cheap behind a
// large held backlog.
const wakeScanRows = 4

// ErrPayloadTooLarge is wrapped by a claimed row's DecodeErr when its
// payload is larger than Config.MaxBatchBytes: the claim does not read it
// (the relay dead-letters the row), so that no single row takes the relay
// past its memory bound.
var ErrPayloadTooLarge = errors.New("payload larger than the claim's byte bound")

// claimedRow is one row of the claim statement (Claim), scanned by
// column name (sqlfile.Columns, which looks the names up once per claim).
// Payload scans straight into a fresh []byte (nil for SQL NULL). Every column a writer controls scans into a type that takes any
// value the column can hold: a row the relay cannot use becomes a dead
// letter by itself (DecodeErr), never a claim that fails after it
// committed, again at every lease. TakenOver and More are the batch's,
// repeated on every row.
type claimedRow struct {
	Seq           int64              `db:"seq"`
	ID            string             `db:"id"`
	AggregateID   string             `db:"aggregate_id"`
	EventType     string             `db:"event_type"`
	Payload       []byte             `db:"payload"`
	Headers       []byte             `db:"headers"`
	Topic         *string            `db:"topic"`
	CreatedAt     pgtype.Timestamptz `db:"created_at"`
	Attempts      int                `db:"attempts"`
	LockedUntil   time.Time          `db:"locked_until"`
	AggregateType *string            `db:"aggregate_type"`
	KeyPartition  int                `db:"key_partition"`
	LeaseMS       int64              `db:"lease_ms"`
	PayloadSize   *int64             `db:"payload_size"`
	TakenOver     int                `db:"taken_over"`
	More          bool               `db:"more"`
}

// readClaimed reads the claim statement's rows; maxBytes is
// Config.MaxBatchBytes.
func readClaimed(br pgx.BatchResults, token uuid.UUID, maxBytes int64) (*Batch, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	defer rows.Close()
	batch := &Batch{Token: token}
	var read int64 // payload bytes kept (Row.Unread)
	var c claimedRow
	var dest []any // c's fields in the order of the columns
	for rows.Next() {
		if dest == nil {
			if dest, err = sqlfile.Columns(rows.FieldDescriptions(), &c); err != nil {
				return nil, fmt.Errorf("claim batch: scan: %w", err)
			}
		}
		c = claimedRow{}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		r := Row{Seq: c.Seq, ID: c.ID, AggregateID: c.AggregateID, EventType: c.EventType, Payload: c.Payload,
			Attempts: c.Attempts, KeyPartition: c.KeyPartition}
		batch.LockedUntil, batch.TakenOver, batch.More = c.LockedUntil, c.TakenOver, c.More
		size, created, headers := c.PayloadSize, c.CreatedAt, c.Headers
		// As the claim counts payload_size: a row is read while the
		// bytes read before it are under the bound, here a quarter
		// over it: JSON prints a little larger than jsonb stores it (a
		// space after each ':' and ','), and a row left unread costs a
		// give-back and a pause of the pipeline (Row.Unread).
		if read >= maxBytes+maxBytes/4 {
			r.Payload, r.Unread = nil, true
		} else {
			read += int64(len(r.Payload))
		}
		if size != nil && *size > maxBytes {
			r.DecodeErr = fmt.Errorf("%w: %d bytes (payload_size, recorded at insert) against lease.Config.MaxBatchBytes %d (--max-batch-bytes); it was not read: raise the bound to publish the event, if the broker's message.max.bytes allows records that large",
				ErrPayloadTooLarge, *size, maxBytes)
		}
		batch.Lease = time.Duration(c.LeaseMS) * time.Millisecond
		r.CreatedAt = created.Time
		if !created.Valid || created.InfinityModifier != pgtype.Finite {
			r.DecodeErr = fmt.Errorf("created_at is %s: not a timestamp the relay can publish", timestamptzText(created))
		}
		if c.Topic != nil {
			r.Topic = *c.Topic
		}
		if c.AggregateType != nil {
			r.AggregateType = *c.AggregateType
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
	return batch, nil
}

// timestamptzText names a created_at value that is not a finite time.
func timestamptzText(t pgtype.Timestamptz) string {
	switch {
	case !t.Valid:
		return "NULL"
	case t.InfinityModifier == pgtype.Infinity:
		return "infinity"
	case t.InfinityModifier == pgtype.NegativeInfinity:
		return "-infinity"
	}
	return t.Time.String()
}

// queueAdvance queues the floor's statements, in this order: the
// sequence before the transactions running (a transaction that took a
// seq before the first read has ended or is among them), the snapshot
// after both; the last one's read moves the floor.
func (c *Claimer) queueAdvance(s *steps) {
	var seq int64
	var cache *int64
	var holders []string
	var minUnpublished *int64
	s.scan(c.st.advanceSeq.SQL, nil, "claim batch: advance floor: sequence", &seq, &cache)
	s.scan(c.st.advanceVXID.SQL, nil, "claim batch: advance floor: transactions", &holders)
	s.add(c.st.advance.SQL, c.st.advance.Args(advanceArgs{Floor: c.fl.at, OwnedMask: c.own.ownedMask()}), func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&minUnpublished); err != nil {
			return fmt.Errorf("claim batch: advance floor: %w", err)
		}
		if seq < c.fl.lastSeq {
			c.fl.restarted()
		}
		c.fl.lastSeq = seq
		if cache == nil || *cache == 1 {
			c.fl.advance(seq, holders, minUnpublished)
		}
		c.fl.lastAdvance = time.Now()
		return nil
	})
}

// Restarts counts the times the Claimer found its table's sequence below
// a value it had read before, and dropped its floor (see Floor).
func (c *Claimer) Restarts() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fl.restarts
}

// Floor returns the seq below which this Claimer knows every row is
// published; its claims scan from there. It drops to 0 when the table's
// sequence is found to have gone back (Restarts), and rises again as the
// new sequence's values settle.
func (c *Claimer) Floor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fl.at
}
