package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// Publisher is what the relay needs from a Kafka producer;
// *kafka.Publisher implements it.
type Publisher interface {
	// Publish writes msgs and returns nil when all were acknowledged, a
	// *kafka.PublishError with one entry per message, or an error for the
	// whole call.
	Publish(ctx context.Context, msgs []kafka.Message) error
	// MaxBatchBytes is the most bytes one Publish call may carry so that
	// each partition's share goes in one produce request.
	MaxBatchBytes() int64
}

// Claimer is what the relay needs from the lease store; *lease.Claimer
// implements it.
type Claimer interface {
	Claim(ctx context.Context) (*lease.Batch, error)
	MarkPublished(ctx context.Context, token uuid.UUID, ids []uuid.UUID) (int64, error)
	Release(ctx context.Context, token uuid.UUID, ids []uuid.UUID, retryDelay time.Duration, countAttempt bool, lastError string) (int64, error)
	DeadLetter(ctx context.Context, token uuid.UUID, ids []uuid.UUID, hold, countAttempt bool, lastError string) (int64, error)
	Close(ctx context.Context) error
	Config() lease.Config
}

// Stats are cumulative counters of one Relay, for tests, benchmarks and
// metrics.
type Stats struct {
	// Claims counts claim statements run; EmptyClaims those that found no
	// row.
	Claims, EmptyClaims int64
	// Published counts events Kafka acknowledged; Marked those marked
	// published (fewer when a lease was lost); Failed publish failures;
	// Skipped events held back behind a failed earlier event of their
	// aggregate; Released events given back; DeadLettered events parked.
	Published, Marked, Failed, Skipped, Released, DeadLettered int64
	// Wakeups counts wake-ups by cause.
	WakeNotify, WakePoll, WakeLinger, WakeBacklog int64
}

// Relay moves events from the outbox table to Kafka.
type Relay struct {
	cfg     Config
	lease   lease.Config
	claimer Claimer
	pub     Publisher
	wake    <-chan struct{}
	log     *zap.Logger

	// claimStarts numbers claims in the order they start; the publisher
	// uses it to know which claimed batches may still hold events of an
	// aggregate whose earlier event just failed.
	claimStarts atomic.Uint64
	// pauseUntil (unix nanos) holds the claimer back after a publish
	// failed for a whole batch: the broker is down, claiming more only
	// churns rows.
	pauseUntil atomic.Int64

	stats struct {
		claims, emptyClaims, published, marked, failed, skipped, released, deadLettered atomic.Int64
		wakeNotify, wakePoll, wakeLinger, wakeBacklog                                   atomic.Int64
	}

	// OnPublished, if set before Run, is called after each publish with the
	// rows Kafka acknowledged (metrics, tests, benchmarks; keep it fast).
	OnPublished func(rows []lease.Row)
	// OnClaim, if set before Run, is called after each claim with its
	// duration, the rows it leased, how many of them were taken over from
	// an expired lease, and its error (metrics; keep it fast).
	OnClaim func(d time.Duration, rows, takenOver int, err error)
	// OnMark, if set before Run, is called after each mark with its
	// duration, the rows it tried to mark, how many it marked (fewer: the
	// lease was lost) and its error.
	OnMark func(d time.Duration, ids int, marked int64, err error)
	// OnPublishFailure, if set before Run, is called for each event whose
	// publish failed, with its topic, the error (see kafka.ErrorReason) and
	// whether it was dead-lettered.
	OnPublishFailure func(row lease.Row, topic string, err error, deadLettered bool)
}

// New returns a Relay. wake delivers wake-up signals (notify.Listener.Wake);
// nil means poll only: the relay then claims every PollInterval and does not
// linger. It returns cfg's validation error.
func New(cfg Config, claimer Claimer, pub Publisher, wake <-chan struct{}, logger *zap.Logger) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if claimer == nil || pub == nil {
		return nil, errors.New("relay: claimer and publisher are required")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if wake == nil {
		// Lingering covers the events committed inside a writer's
		// wake-up debounce window; without notifications there is no
		// window to cover, and the relay is a plain poller.
		cfg.Linger = -1
	}
	return &Relay{cfg: cfg, lease: claimer.Config(), claimer: claimer, pub: pub, wake: wake, log: logger.Named("relay")}, nil
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() Stats {
	s := &r.stats
	return Stats{
		Claims: s.claims.Load(), EmptyClaims: s.emptyClaims.Load(),
		Published: s.published.Load(), Marked: s.marked.Load(), Failed: s.failed.Load(),
		Skipped: s.skipped.Load(), Released: s.released.Load(), DeadLettered: s.deadLettered.Load(),
		WakeNotify: s.wakeNotify.Load(), WakePoll: s.wakePoll.Load(),
		WakeLinger: s.wakeLinger.Load(), WakeBacklog: s.wakeBacklog.Load(),
	}
}

// claimed is a batch with the number of the claim that produced it.
type claimed struct {
	*lease.Batch
	no uint64
}

// markJob is work for the marker: rows to mark published.
type markJob struct {
	token uuid.UUID
	ids   []uuid.UUID
}

// Run relays until ctx is done, then shuts down gracefully within
// Config.ShutdownTimeout and returns nil. Database and broker errors are
// logged and retried with backoff; they never end Run.
func (r *Relay) Run(ctx context.Context) error {
	// work outlives ctx by at most ShutdownTimeout: in-flight publishes,
	// marks and releases finish on it.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopHard := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.cfg.ShutdownTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopHard()

	batches := make(chan claimed, 1)
	marks := make(chan markJob, 4)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.runMarker(work, marks)
	}()
	go func() {
		defer wg.Done()
		defer close(marks)
		r.runPublisher(ctx, work, batches, marks)
	}()
	r.runClaimer(ctx, batches)
	close(batches)
	wg.Wait()
	// Everything is marked or released: tell the other relays.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
	if err := r.claimer.Close(cctx); err != nil {
		r.log.Warn("could not deregister from the order guard; other relays keep using it until this relay's leases would have ended", zap.Error(err))
	}
	cancel()
	r.log.Info("relay stopped", zap.Int64("published", r.stats.published.Load()))
	return nil
}

// runClaimer waits for a reason to claim, claims, and hands batches over.
func (r *Relay) runClaimer(ctx context.Context, out chan<- claimed) {
	poll := time.NewTimer(jitter(r.cfg.PollInterval, 0.1))
	defer poll.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	// Lingering: after a claim found events, claim again every gap until
	// activeUntil (see Config.Linger).
	var activeUntil, lastClaim time.Time
	gap := r.cfg.LingerPoll
	rate := 0.0     // events per second found by recent claims, smoothed
	backlog := true // claim at once on start
	failures := 0
	for {
		if !backlog {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				r.stats.wakeNotify.Add(1)
			case <-poll.C:
				r.stats.wakePoll.Add(1)
			case <-linger.C:
				r.stats.wakeLinger.Add(1)
			}
		} else {
			r.stats.wakeBacklog.Add(1)
			backlog = false
		}
		if wait := time.Until(time.Unix(0, r.pauseUntil.Load())); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		// Drain a pending notification: this claim covers it.
		select {
		case <-r.wake:
		default:
		}
		resetTimer(poll, jitter(r.cfg.PollInterval, 0.1))

		no := r.claimStarts.Add(1)
		// The claim is not cancelled by shutdown: a statement cancelled
		// after the server committed it would leave rows leased by a claim
		// nobody holds until the lease ends. It is bounded by DBTimeout, and
		// a batch claimed during shutdown is released below.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
		began := time.Now()
		sinceLast := began.Sub(lastClaim)
		lastClaim = began
		b, err := r.claimer.Claim(cctx)
		cancel()
		r.stats.claims.Add(1)
		if r.OnClaim != nil {
			if err != nil {
				r.OnClaim(time.Since(began), 0, 0, err)
			} else {
				r.OnClaim(time.Since(began), len(b.Rows), b.TakenOver, nil)
			}
		}
		if err == nil && b.TakenOver > 0 {
			r.log.Warn("lease takeover: took events whose lease had expired; a relay died or stalled, they may be published again",
				zap.Int("events", b.TakenOver))
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := backoff(r.cfg.RetryMin, r.cfg.RetryMax/4, failures)
			fields := []zap.Field{zap.Error(err), zap.Duration("retry_in", d), zap.Int("failures", failures)}
			switch {
			case lease.IsMissingTable(err):
				r.log.Error("outbox table not found: run `outbox-relay migrate`", append(fields, zap.String("table", r.lease.Table))...)
			case lease.IsSchemaMismatch(err):
				r.log.Error("outbox table has the wrong shape: run `outbox-relay migrate`", append(fields, zap.String("table", r.lease.Table))...)
			default:
				r.log.Warn("claim failed", fields...)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			backlog = true
			continue
		}
		failures = 0
		if len(b.Rows) == 0 {
			r.stats.emptyClaims.Add(1)
			rate = arrivalRate(rate, 0, sinceLast)
			if now := time.Now(); now.Before(activeUntil) {
				gap = min(2*gap, 4*r.cfg.LingerPoll)
				resetTimer(linger, min(gap, activeUntil.Sub(now)))
			}
			continue
		}
		if ce := r.log.Check(zap.DebugLevel, "claimed"); ce != nil {
			ce.Write(zap.Int("rows", len(b.Rows)), zap.Uint64("claim_no", no), zap.Stringer("claim_token", b.Token))
		}
		select {
		case out <- claimed{Batch: b, no: no}:
		case <-ctx.Done():
			// Shutting down with a batch nobody will publish: give it back.
			r.release(context.WithoutCancel(ctx), b.Token, rowIDs(b.Rows), 0, false, "")
			return
		}
		if len(b.Rows) >= r.lease.BatchSize {
			backlog = true
		} else if r.cfg.Linger > 0 {
			activeUntil = time.Now().Add(r.cfg.Linger)
			// Below one event per LingerPoll (2,000/s by default) a claim
			// follows every LingerPoll, for latency. Above it the relay is
			// busy and claims every 40×LingerPoll (20ms) instead, taking
			// bigger batches rather than a round trip per few events, which
			// on a small machine takes CPU from the writers (measured: 0.83-
			// 0.87x of their commits/s with a 10ms gap, 0.92-0.98x with 20ms).
			rate = arrivalRate(rate, len(b.Rows), sinceLast)
			gap = r.cfg.LingerPoll
			if rate*r.cfg.LingerPoll.Seconds() >= 1 {
				gap = 40 * r.cfg.LingerPoll
			}
			resetTimer(linger, gap)
		}
	}
}

// runPublisher publishes batches in claim order. It stops publishing new
// batches when ctx is done and releases them instead; work bounds the
// in-flight publish.
func (r *Relay) runPublisher(ctx, work context.Context, in <-chan claimed, marks chan<- markJob) {
	// blocked maps an aggregate whose event failed to the last claim
	// number that may still hold its later events (claims that started
	// before the failed row's release committed).
	blocked := map[string]uint64{}
	// heldUntil maps an aggregate whose failed row could not be released
	// to that row and when its lease ends.
	heldUntil := map[string]held{}
	// after maps an aggregate whose events a batch gave back unpublished
	// (skipped or unsent) to the lowest such seq and the last claim number
	// that may hold its later events: claims that started before that
	// release committed, while those events were still leased by this relay
	// and so did not hold back its claims.
	after := map[string]skipMark{}
	outages := 0 // publishes in a row that delivered nothing
	for b := range in {
		for agg, no := range blocked {
			if no < b.no {
				delete(blocked, agg)
			}
		}
		for agg, m := range after {
			if m.no < b.no {
				delete(after, agg)
			}
		}
		for agg, h := range heldUntil {
			if b.Claimed.After(h.until.Add(time.Minute)) {
				delete(heldUntil, agg)
			}
		}
		if ctx.Err() != nil {
			r.release(work, b.Token, rowIDs(b.Rows), 0, false, "")
			continue
		}
		if r.publishBatch(ctx, work, b, blocked, heldUntil, after, marks) {
			outages++
			// Nothing got through: hold the claimer back, growing with
			// each outage in a row; the broker is likely down.
			pause := backoff(r.cfg.RetryMin, min(r.cfg.RetryMax, maxOutagePause), outages)
			r.pauseUntil.Store(time.Now().Add(pause).UnixNano())
		} else {
			outages = 0
		}
	}
}

// unreachable reports whether every error in errs says the broker was not
// reached.
func unreachable(errs []error) bool {
	for _, e := range errs {
		if e != nil && e != errHeld && !kafka.IsUnreachable(e) {
			return false
		}
	}
	return true
}

// maxOutagePause caps how long the claimer waits between attempts while the
// broker is unreachable, so publishing resumes within seconds of its return.
const maxOutagePause = 5 * time.Second

// held is an event that failed and could not be released, still leased by
// this relay until until.
type held struct {
	seq   int64
	until time.Time
}

// holds reports whether row, in a batch claimed at claimed, must wait
// behind the held event: it is a later event of the same aggregate, and the
// held event's lease had not ended when the batch was claimed.
func (h held) holds(row lease.Row, claimed time.Time) bool {
	return !h.until.IsZero() && row.Seq > h.seq && claimed.Before(h.until)
}

// skipMark holds back, in batches claimed up to claim number no, the events
// of an aggregate after seq: an earlier event (seq) was given back
// unpublished after those claims started, so they may hold its later events
// without it.
type skipMark struct {
	seq int64
	no  uint64
}

// holds reports whether row, in the batch of claim number no, must wait.
func (m skipMark) holds(row lease.Row, no uint64) bool {
	return m.no >= no && row.Seq > m.seq
}

// errHeld marks a message not sent because an earlier event of its
// aggregate failed in the same chunk.
var errHeld = errors.New("held behind an earlier failed event of its aggregate")

// publishChunk publishes msgs (rows are their rows) and returns one error
// per message, plus the error of the call. A record batch is refused as a
// whole (MESSAGE_TOO_LARGE is judged on the batch against the broker's
// message.max.bytes, INVALID_RECORD on any record in it), so when the broker
// rejects a batch of several records, the rejected messages are sent again
// one at a time, in order, as the Java producer splits a batch that was too
// large: only a record rejected on its own is dead-lettered, and once one is,
// the later events of its aggregate are held (errHeld).
func (r *Relay) publishChunk(work context.Context, msgs []kafka.Message, rows []lease.Row) ([]error, error) {
	err := r.pub.Publish(work, msgs)
	errs := make([]error, len(msgs))
	var perr *kafka.PublishError
	switch {
	case err == nil:
		return errs, nil
	case errors.As(err, &perr) && len(perr.Errs) == len(msgs):
		copy(errs, perr.Errs)
	default:
		for i := range errs {
			errs[i] = err
		}
		return errs, err
	}
	if len(msgs) == 1 {
		return errs, err
	}
	var retry []int
	for i, e := range errs {
		if kafka.IsRecordRejected(e) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return errs, err
	}
	failed := map[string]bool{}
	for _, i := range retry {
		if failed[rows[i].AggregateID] {
			errs[i] = errHeld
			continue
		}
		errs[i] = r.pub.Publish(work, msgs[i:i+1])
		var one *kafka.PublishError
		if errors.As(errs[i], &one) && len(one.Errs) == 1 {
			errs[i] = one.Errs[0]
		}
		if errs[i] != nil {
			failed[rows[i].AggregateID] = true
		}
	}
	return errs, err
}

type failure struct {
	row lease.Row
	err error
}

// publishBatch publishes one claimed batch and reports whether it hit an
// outage (a publish that delivered nothing).
func (r *Relay) publishBatch(ctx, work context.Context, b claimed, blocked map[string]uint64, heldUntil map[string]held, after map[string]skipMark, marks chan<- markJob) (outage bool) {
	maxBytes := r.pub.MaxBatchBytes()
	failedAggs := map[string]bool{}
	var skipped []uuid.UUID
	var failures []failure
	var unsent []uuid.UUID
	// givenBack is the lowest seq per aggregate of the rows skipped or
	// unsent.
	givenBack := map[string]int64{}
	giveBack := func(list *[]uuid.UUID, row lease.Row) {
		*list = append(*list, row.ID)
		if s, ok := givenBack[row.AggregateID]; !ok || row.Seq < s {
			givenBack[row.AggregateID] = row.Seq
		}
	}

	// heldBack: row's aggregate failed earlier in this batch, or an
	// earlier event of it is still to go out first (see runPublisher).
	heldBack := func(row lease.Row) bool {
		return failedAggs[row.AggregateID] || blocked[row.AggregateID] >= b.no ||
			heldUntil[row.AggregateID].holds(row, b.Claimed) || after[row.AggregateID].holds(row, b.no)
	}

	rows := b.Rows
	chunkTopic := map[string]string{}
	msgs := make([]kafka.Message, 0, len(rows))
	chunk := make([]lease.Row, 0, len(rows))
	for start := 0; start < len(rows); {
		if ctx.Err() != nil || work.Err() != nil {
			// Shutdown: what was not sent yet goes back at once.
			for _, row := range rows[start:] {
				giveBack(&unsent, row)
			}
			break
		}
		// Build the next chunk: at most maxBytes (one produce request per
		// partition), skipping aggregates that failed or are blocked.
		msgs, chunk = msgs[:0], chunk[:0]
		clear(chunkTopic)
		var size int64
		i := start
		for ; i < len(rows); i++ {
			row := rows[i]
			if heldBack(row) {
				giveBack(&skipped, row)
				continue
			}
			m := r.message(row)
			// An aggregate's events in one chunk all go to one topic, so to
			// one partition, in one produce request: all or nothing, in
			// order. An event for another topic than its aggregate's
			// earlier one in this chunk starts the next chunk, which is only
			// sent if this one delivered the earlier event.
			if t, ok := chunkTopic[row.AggregateID]; ok && t != m.Topic {
				break
			}
			n := kafka.MessageSize(&m)
			if n > maxBytes {
				failures = append(failures, failure{row, fmt.Errorf("event is %d bytes, over the publisher's limit of %d bytes (message.max.bytes): %w", n, maxBytes, kafka.ErrMessageTooLarge)})
				failedAggs[row.AggregateID] = true
				continue
			}
			if size+n > maxBytes && len(msgs) > 0 {
				break
			}
			size += n
			msgs = append(msgs, m)
			chunk = append(chunk, row)
			chunkTopic[row.AggregateID] = m.Topic
		}
		start = i
		if len(msgs) == 0 {
			continue
		}
		errs, err := r.publishChunk(work, msgs, chunk)
		var delivered []uuid.UUID
		var deliveredRows []lease.Row
		for j, row := range chunk {
			e := errs[j]
			if e == errHeld {
				giveBack(&skipped, row)
				continue
			}
			if e == nil && failedAggs[row.AggregateID] {
				// Delivered, but an earlier event of its aggregate in this
				// chunk failed: do not mark it, so it is published again
				// after that one.
				giveBack(&skipped, row)
				continue
			}
			if e != nil && work.Err() != nil {
				// Cut off by the shutdown deadline, outcome unknown: give
				// it back at once, without counting an attempt; whoever
				// claims it next publishes it (again).
				giveBack(&unsent, row)
				continue
			}
			if e != nil {
				failures = append(failures, failure{row, e})
				failedAggs[row.AggregateID] = true
				continue
			}
			delivered = append(delivered, row.ID)
			deliveredRows = append(deliveredRows, row)
		}
		if len(delivered) > 0 {
			r.stats.published.Add(int64(len(delivered)))
			if r.OnPublished != nil {
				r.OnPublished(deliveredRows)
			}
			marks <- markJob{token: b.Token, ids: delivered}
		}
		if err != nil && len(delivered) == 0 && unreachable(errs) {
			// Nothing got through and the broker did not answer: stop this
			// batch and hold the claimer back, the broker is likely down.
			for _, row := range rows[start:] {
				if heldBack(row) {
					giveBack(&skipped, row)
				} else {
					giveBack(&unsent, row)
				}
			}
			outage = true
			break
		}
	}

	if len(failures) > 0 {
		r.stats.failed.Add(int64(len(failures)))
		for _, row := range r.releaseFailures(work, b.Token, failures) {
			// Its failed row stays leased by this relay until the lease
			// ends (plus a margin for clock rates); hold the aggregate's
			// later events back in every batch claimed before then. A
			// claim after that finds the row claimable again, and claims
			// take the lowest seq first.
			heldUntil[row.AggregateID] = held{seq: row.Seq, until: b.Deadline(r.lease.Lease).Add(time.Second)}
		}
		// Batches whose claim started before that release committed may
		// hold later events of these aggregates: hold them back there too.
		last := r.claimStarts.Load()
		for agg := range failedAggs {
			blocked[agg] = last
		}
	}
	if len(skipped) > 0 {
		r.stats.skipped.Add(int64(len(skipped)))
		r.release(work, b.Token, skipped, 0, false, "")
	}
	if len(unsent) > 0 {
		r.release(work, b.Token, unsent, 0, false, "")
	}
	if len(givenBack) > 0 {
		// Until the release above committed, those rows were leased by this
		// relay, which does not hold back its own claims: a claim started
		// meanwhile (after a failed earlier event became claimable again:
		// requeued, or its backoff ran out) may hold later events of their
		// aggregates without them. Hold those back in every batch claimed
		// so far. A claim after this finds the rows claimable, and claims
		// take the lowest seq first.
		last := r.claimStarts.Load()
		for agg, seq := range givenBack {
			if m, ok := after[agg]; ok && m.seq < seq {
				seq = m.seq
			}
			after[agg] = skipMark{seq: seq, no: last}
		}
	}
	return outage
}

// releaseFailures gives failed rows back with a per-row backoff and their
// error, or dead-letters them: at once when Kafka rejected the record
// itself, or when the attempt just made was their MaxAttempts-th. Failures
// where the broker was not reached do not count as attempts. Rows with the
// same outcome, delay and error share a statement.
//
// It returns the failed rows it could not give back: such a row stays
// leased by this relay until its lease ends, and since a relay's own leases
// do not hold back its claims, the caller must hold the later events of its
// aggregate back itself until then.
func (r *Relay) releaseFailures(ctx context.Context, token uuid.UUID, fs []failure) (stuck []lease.Row) {
	type key struct {
		dead     bool
		count    bool
		attempts int
		msg      string
	}
	groups := map[key][]uuid.UUID{}
	rowOf := map[uuid.UUID]lease.Row{}
	unreachable := 0
	var firstUnreachable error
	for _, f := range fs {
		count := !kafka.IsUnreachable(f.err)
		attempts := f.row.Attempts
		if count {
			attempts++
		}
		dead := kafka.IsRecordRejected(f.err) || attempts >= r.cfg.MaxAttempts
		if r.OnPublishFailure != nil {
			r.OnPublishFailure(f.row, r.topicOf(f.row), f.err, dead)
		}
		k := key{dead: dead, count: count, attempts: attempts, msg: f.err.Error()}
		groups[k] = append(groups[k], f.row.ID)
		rowOf[f.row.ID] = f.row
		fields := []zap.Field{
			zap.String("event_id", f.row.ID.String()),
			zap.String("aggregate_id", f.row.AggregateID),
			zap.String("event_type", f.row.EventType),
			zap.Int("attempts", attempts),
			zap.Error(f.err),
		}
		switch {
		case dead:
			r.log.Error("event dead-lettered: it stays in the outbox table; fix the cause, then `outbox-relay requeue --event-id`",
				append(fields, zap.String("on_dead_letter", r.cfg.OnDeadLetter))...)
		case count:
			r.log.Warn("publish failed; will retry", fields...)
		default:
			unreachable++
			if firstUnreachable == nil {
				firstUnreachable = f.err
			}
		}
	}
	if unreachable > 0 {
		// One line per batch, not per event: an outage fails every event.
		r.log.Warn("publish failed: broker unreachable; will retry", zap.Int("events", unreachable), zap.Error(firstUnreachable))
	}
	stick := func(ids []uuid.UUID) {
		for _, id := range ids {
			stuck = append(stuck, rowOf[id])
		}
	}
	for k, ids := range groups {
		if k.dead {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
			n, err := r.claimer.DeadLetter(rctx, token, ids, r.cfg.OnDeadLetter == DeadLetterHold, k.count, k.msg)
			cancel()
			if err != nil {
				r.log.Warn("dead-letter failed; rows come back when their lease ends", zap.Error(err), zap.Int("rows", len(ids)))
				stick(ids)
				continue
			}
			r.stats.deadLettered.Add(n)
			continue
		}
		d := backoff(r.cfg.RetryMin, r.cfg.RetryMax, max(k.attempts, 1))
		if err := r.release(ctx, token, ids, d, k.count, k.msg); err != nil {
			stick(ids)
		}
	}
	return stuck
}

func (r *Relay) release(ctx context.Context, token uuid.UUID, ids []uuid.UUID, delay time.Duration, countAttempt bool, lastError string) error {
	if len(ids) == 0 {
		return nil
	}
	// A release must happen even on a hard shutdown; bound it on its own,
	// and try again a couple of times: a transient database error must not
	// leave the rows held until their lease ends.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DBTimeout)
		var n int64
		n, err = r.claimer.Release(rctx, token, ids, delay, countAttempt, lastError)
		cancel()
		if err == nil {
			r.stats.released.Add(n)
			if ce := r.log.Check(zap.DebugLevel, "released"); ce != nil {
				ce.Write(zap.Int("rows", len(ids)), zap.Int64("released", n), zap.Duration("retry_in", delay), zap.Stringer("claim_token", token))
			}
			return nil
		}
		time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
	}
	r.log.Warn("release failed; rows come back when their lease ends", zap.Error(err), zap.Int("rows", len(ids)))
	return err
}

// runMarker marks delivered rows published, retrying a failed mark while
// the lease lasts.
func (r *Relay) runMarker(work context.Context, in <-chan markJob) {
	for job := range in {
		for attempt := 1; ; attempt++ {
			mctx, cancel := context.WithTimeout(work, r.cfg.DBTimeout)
			began := time.Now()
			n, err := r.claimer.MarkPublished(mctx, job.token, job.ids)
			cancel()
			if r.OnMark != nil {
				r.OnMark(time.Since(began), len(job.ids), n, err)
			}
			if err == nil {
				r.stats.marked.Add(n)
				if n < int64(len(job.ids)) {
					r.log.Warn("lease lost before mark: another relay holds these rows and will publish them again",
						zap.Int("rows", len(job.ids)), zap.Int64("marked", n))
				}
				break
			}
			if work.Err() != nil || attempt >= 5 {
				r.log.Error("mark published failed; rows will be published again after their lease", zap.Error(err), zap.Int("rows", len(job.ids)))
				break
			}
			d := backoff(50*time.Millisecond, 2*time.Second, attempt)
			r.log.Warn("mark published failed; retrying", zap.Error(err), zap.Duration("retry_in", d))
			select {
			case <-work.Done():
			case <-time.After(d):
			}
		}
	}
}

// message turns a row into a Kafka record: key aggregate ID, value the
// payload, headers event_id, event_type, aggregate_id and the row's own.
func (r *Relay) message(row lease.Row) kafka.Message {
	h := make([]kafka.Header, 0, 3+len(row.Headers))
	h = append(h,
		kafka.Header{Key: "event_id", Value: []byte(row.ID.String())},
		kafka.Header{Key: "event_type", Value: []byte(row.EventType)},
		kafka.Header{Key: "aggregate_id", Value: []byte(row.AggregateID)},
	)
	for k, v := range row.Headers {
		if reservedHeader(k) || (r.cfg.IDHeader != "" && k == r.cfg.IDHeader) {
			// A plain-SQL writer's header must not override the event's
			// identity: consumers dedupe on event_id.
			continue
		}
		h = append(h, kafka.Header{Key: k, Value: []byte(v)})
	}
	if r.cfg.IDHeader != "" && r.cfg.IDHeader != "event_id" {
		h = append(h, kafka.Header{Key: r.cfg.IDHeader, Value: []byte(row.ID.String())})
	}
	return kafka.Message{Topic: r.topicOf(row), Key: []byte(row.AggregateID), Value: row.Payload, Headers: h}
}

// topicOf returns the row's destination: its topic column, else the
// TopicTemplate route, else Config.Topic.
func (r *Relay) topicOf(row lease.Row) string {
	topic := row.Topic
	if topic == "" && r.cfg.TopicTemplate != "" && row.AggregateType != "" {
		topic = r.routeTopic(row.AggregateType)
	}
	if topic == "" {
		topic = r.cfg.Topic
	}
	return topic
}

// routeTopic expands Config.TopicTemplate for an aggregate type.
func (r *Relay) routeTopic(aggregateType string) string {
	return strings.NewReplacer("${aggregatetype}", aggregateType, "${routedByValue}", aggregateType).Replace(r.cfg.TopicTemplate)
}

// reservedHeader reports whether k is one of the headers the relay sets
// from the row's columns.
func reservedHeader(k string) bool {
	return k == "event_id" || k == "event_type" || k == "aggregate_id"
}

func rowIDs(rows []lease.Row) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	return ids
}

// arrivalRate folds a claim that found n events, elapsed after the previous
// claim started, into the rate estimate (events/s): an exponentially
// decayed count of the events found over the last rateWindow, divided by
// rateWindow. Averaging over a window, not per claim, keeps random bursts
// of a moderate rate from looking busy.
func arrivalRate(prev float64, n int, elapsed time.Duration) float64 {
	if elapsed < 0 {
		elapsed = 0
	}
	count := prev*rateWindow.Seconds()*math.Exp(-elapsed.Seconds()/rateWindow.Seconds()) + float64(n)
	return count / rateWindow.Seconds()
}

// rateWindow is arrivalRate's averaging window.
const rateWindow = 50 * time.Millisecond

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}

// jitter returns d ± frac·d, uniformly.
func jitter(d time.Duration, frac float64) time.Duration {
	return d + time.Duration(float64(d)*frac*(2*rand.Float64()-1))
}

// backoff returns min·2^(n-1) capped at max, ±20% jitter.
func backoff(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return jitter(d, 0.2)
}
