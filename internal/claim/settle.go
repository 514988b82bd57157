package claim

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Mark names rows to mark published that a claim carries (Claim).
type Mark struct {
	// Token is the claim that leased the rows; Seqs names them.
	Token uuid.UUID
	Seqs  []int64
	// Marked is set by Claim: how many of them it marked (fewer when a
	// lease passed to another claim).
	Marked int64
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
	if err := c.prepared(ctx); err != nil {
		return 0, fmt.Errorf("dead-letter: %w", err)
	}
	c.rewind.Store(true) // as in Release
	var n int64
	q := c.rows.dead
	b := c.settleSteps(q.SQL, q.Args(deadArgs{Seqs: s.Seqs, Token: s.Token, Hold: s.Hold, AttemptInc: attemptInc(s.CountAttempt), LastError: s.LastError}), &n)
	if s.Hold {
		b.exec(c.st.hold.SQL, c.st.hold.Args(holdArgs{}), "", nil)
		c.heldNow.Store(true)
	}
	if err := b.send(ctx, c.pool, ""); err != nil {
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
// follow them in order. It returns how many events it requeued. This
// Claimer's next claim scans the table from the start, not from its floor
// (see Floor), so a requeued row that an UPDATE made unpublished again
// after it was published is found at once; other relays' claims find such
// a row within a minute (their periodic rescan). Errors are wrapped as
// "requeue: ...".
func (c *Claimer) Requeue(ctx context.Context, ids []string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, c.st.plan.SQL); err != nil {
			return err
		}
		// Serialize with releases and dead-letterings, which extend
		// 'holds' in their own transactions.
		if _, err := tx.Exec(ctx, c.st.hold.SQL, c.st.hold.Args(holdArgs{})...); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, c.st.requeue.SQL, c.st.requeue.Args(requeueArgs{IDs: ids})...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		// 'holds' now only needs to cover what still backs off or is held.
		_, err = tx.Exec(ctx, c.st.holdsReset.SQL)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	if n > 0 {
		// A dead letter keeps the floor below it, but a row made
		// unpublished again by hand (a replay) before the requeue may lie
		// below it: the next claim scans from the start.
		c.mu.Lock()
		c.fl.lastRescan = time.Time{}
		c.mu.Unlock()
	}
	return n, nil
}

// settleSteps returns the steps of a release or dead-letter: the plan
// settings (plan.SQL), then sql with args, whose rows affected go to n.
func (c *Claimer) settleSteps(sql string, args []any, n *int64) steps {
	var b steps
	b.exec(c.st.plan.SQL, nil, "", nil)
	b.exec(sql, args, "", func(tag pgconn.CommandTag) { *n = tag.RowsAffected() })
	return b
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
	if err := c.prepared(ctx); err != nil {
		return 0, fmt.Errorf("mark published: %w", err)
	}
	var n int64
	var b steps
	b.exec(c.st.asyncCommit.SQL, nil, "mark published", nil)
	q := c.rows.mark
	b.exec(q.SQL, q.Args(c.created.args(token, seqs)), "mark published", func(tag pgconn.CommandTag) { n = tag.RowsAffected() })
	if err := b.send(ctx, c.pool, "mark published: commit"); err != nil {
		return 0, err
	}
	return n, nil
}

// Extend renews the lease of the rows seqs still held by token to
// Config.Lease from now (database clock), or less when this relay's
// membership ends sooner (see Ownership), and returns the seqs it renewed
// and the lease it gave them: rows whose lease passed to another claim
// meanwhile, or of a partition this relay no longer owns, are missing, and
// must not be published by this claim's holder any more. The relay extends
// a batch that waited behind a slow publish before it publishes it.
// Errors are wrapped as "extend lease: ...".
func (c *Claimer) Extend(ctx context.Context, token uuid.UUID, seqs []int64) ([]int64, time.Duration, error) {
	if len(seqs) == 0 {
		return nil, 0, nil
	}
	if err := c.prepared(ctx); err != nil {
		return nil, 0, fmt.Errorf("extend lease: %w", err)
	}
	var kept []int64
	lease := c.cfg.Lease
	var b steps
	b.exec(c.st.asyncCommit.SQL, nil, "extend lease", nil)
	q := c.rows.extend
	a := extendArgs{Seqs: seqs, Token: token, LeaseMS: c.cfg.Lease.Milliseconds(), Member: c.own.member}
	if c.own.static {
		// As a claim (queueClaim): serialized with a takeover, and only
		// while the member's row is this incarnation's.
		b.exec(c.st.memberShared.SQL, c.st.memberShared.Args(keyArgs{Key: c.own.memberKey}), "extend lease: member lock", nil)
		a.Started = c.own.started.Load()
	}
	b.add(q.SQL, q.Args(a), func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("extend lease: %w", err)
		}
		extended, err := pgx.CollectRows(rows, pgx.RowToStructByName[extendedRow])
		for _, e := range extended {
			kept = append(kept, e.Seq)
			lease = min(lease, time.Duration(e.LeaseMS)*time.Millisecond)
		}
		return wrapErr("extend lease", err)
	})
	if err := b.send(ctx, c.pool, "extend lease: commit"); err != nil {
		return nil, 0, err
	}
	if len(kept) < len(seqs) {
		// The relay drops the rows not renewed (a pause past its
		// membership, say): whoever claims them next, the next claim of
		// this relay scans from the floor, where they are (resume).
		c.rewind.Store(true)
	}
	return kept, lease, nil
}

// Release gives the rows of s still held by s.Token back: claimable at
// once, or after s.RetryIn, during which every later event of their
// aggregates waits too (a failed publish backs off); attempts grow by
// s.CountAttempt and s.LastError, if not empty, replaces last_error. It
// returns how many rows it released. Errors are wrapped as "release: ...".
func (c *Claimer) Release(ctx context.Context, s Settle) (int64, error) {
	if len(s.Seqs) == 0 {
		return 0, nil
	}
	if err := c.prepared(ctx); err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	var le *string
	if s.LastError != "" {
		le = &s.LastError
	}
	// Before the statement: a claim that starts after it committed must
	// scan from the floor, where these rows are (resume).
	c.rewind.Store(true)
	var n int64
	q := c.rows.release
	b := c.settleSteps(q.SQL, q.Args(releaseArgs{Seqs: s.Seqs, Token: s.Token, RetryMS: s.RetryIn.Milliseconds(), AttemptInc: attemptInc(s.CountAttempt), LastError: le}), &n)
	if s.RetryIn > 0 {
		delay := s.RetryIn.Milliseconds()
		b.exec(c.st.hold.SQL, c.st.hold.Args(holdArgs{DelayMS: &delay}), "", nil)
	}
	if err := b.send(ctx, c.pool, ""); err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return n, nil
}

// extendedRow is a row of the Extend statement: a row whose lease was
// renewed and how long its new lease lasts.
type extendedRow struct {
	Seq     int64 `db:"seq"`
	LeaseMS int64 `db:"lease_ms"`
}
