package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/backoff"
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
	// Claim also marks published, in the claim's transaction, the rows of
	// marks (lease.Claimer.Claim).
	Claim(ctx context.Context, marks ...*lease.Mark) (*lease.Batch, error)
	MarkPublished(ctx context.Context, token uuid.UUID, seqs []int64) (int64, error)
	Extend(ctx context.Context, token uuid.UUID, seqs []int64) ([]int64, time.Duration, error)
	Release(ctx context.Context, s lease.Settle) (int64, error)
	DeadLetter(ctx context.Context, s lease.Settle) (int64, error)
	// Settled says the relay is done with a claimed batch (its rows
	// published, given back or dead-lettered; rows it could not give back
	// stay leased until busyUntil): the claimer gives a key partition to
	// another relay only once no unsettled batch holds rows of it.
	Settled(token uuid.UUID, busyUntil time.Time)
	// Ownership says which key partitions the claimer owns.
	Ownership() lease.Ownership
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
	// HeldBack events given back unpublished because an earlier event of
	// their aggregate was not published first; Released events given back
	// (failed, held back, or not sent); DeadLettered events parked.
	Published, Marked, Failed, HeldBack, Released, DeadLettered int64
	// Wakeups counts wake-ups by cause.
	WakeNotify, WakePoll, WakeWindow, WakeBacklog int64
	// Key partitions (lease.Ownership): how many this relay owns now, of
	// how many, among how many relays; how many it acquired, gave back,
	// and acquired from another relay (handovers).
	OwnedPartitions, Partitions, Relays               int64
	PartitionsAcquired, PartitionsReleased, Handovers int64
	// Member is this relay's member name in the table's relays
	// (lease.Claimer.Member): the owner name of its key partitions.
	Member string
}

// Relay moves events from the outbox table to Kafka.
type Relay struct {
	cfg     Config
	lease   lease.Config
	claimer Claimer
	pub     Publisher
	wake    <-chan struct{}
	log     *zap.Logger
	obs     Observer
	// att is told each event's publish attempts, nil when no observer
	// asks for them (AttemptObserver); partitionOf names an event's
	// partition for it (nil: the publisher does not say).
	att         attempter
	partitionOf func(topic string, key []byte) int

	// gate numbers claims and holds the claimer back after a give-back
	// until the pipeline settled, and after an outage (see claimGate).
	gate *claimGate
	// hb is the hold-back state; the publisher goroutine owns it.
	hb *holdback
	// marks are the delivered chunks waiting to be marked (marks.go).
	marks *markQueue
	// fails aggregates publish-failure log lines; publisher goroutine only.
	fails *failureLog
	// stop bounds the statements of a stopping relay and records what it
	// could not do (shutdown.go).
	stop *shutdown
	// progress says whether events are moving (Health).
	progress progress
	// lastOwned and lastMembers are what the claimer owned at the last
	// claim (recordOwnership); claimer goroutine only.
	lastOwned, lastMembers int
	// ownedShare is the part of the key partitions the claimer owned at
	// the last claim (0 until it owns some): the claim schedule's busy
	// threshold is the table's rate (busy). Claimer goroutine only.
	ownedShare float64
	// clock is every time reading, timer and sleep of the relay (clock.go;
	// the model tests replace it).
	clock clock

	// stats are the Stats counters (record.go).
	stats counters
}

// New returns a Relay. wake delivers wake-up signals (notify.Listener.Wake);
// nil means poll only: the relay then claims every PollInterval and does not
// linger. It returns cfg's validation error, or an error when the
// publisher's attempt budget (kafka.Publisher.AttemptBudget: attempts ×
// write timeout) is more than half the claimer's lease: a publish that
// outlives the lease lets a claim take its rows over and publish them again.
func New(cfg Config, claimer Claimer, pub Publisher, wake <-chan struct{}, logger *zap.Logger) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if claimer == nil || pub == nil {
		return nil, errors.New("relay: claimer and publisher are required")
	}
	lc := claimer.Config()
	if b, ok := pub.(interface{ AttemptBudget() time.Duration }); ok && b.AttemptBudget() > lc.Lease/2 {
		return nil, &BudgetError{Budget: b.AttemptBudget(), Lease: lc.Lease}
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if wake == nil {
		// Lingering covers the events committed inside a writer's
		// wake-up debounce window; without notifications there is no
		// window to cover, and the relay is a plain poller.
		cfg.ClaimWindow = -1
	}
	obs := cfg.Observer
	if obs == nil {
		obs = ObserverFuncs{}
	}
	log := logger.Named("relay")
	r := &Relay{
		cfg: cfg, lease: lc, claimer: claimer, pub: pub, wake: wake, log: log, obs: obs,
		att:  attemptObserverOf(obs),
		gate: newClaimGate(), hb: newHoldback(), marks: newMarkQueue(realClock{}), fails: newFailureLog(log, failureLogEvery), stop: newShutdown(),
		progress: progress{stallAfter: cfg.StallTimeout},
		clock:    realClock{},
	}
	if p, ok := pub.(interface{ PartitionOf(string, []byte) int }); ok {
		r.partitionOf = p.PartitionOf
	}
	return r, nil
}

// BudgetError is returned by New when one publish may outlast half the
// lease. Callers map its fields onto their flags.
type BudgetError struct {
	// Budget is the publisher's attempt budget; Lease the claimer's lease.
	Budget, Lease time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("relay: one publish may take %s (kafka.Config.MaxAttempts × WriteTimeout, plus backoffs), more than half of lease.Config.Lease (%s): lower the write timeout or lengthen the lease", e.Budget, e.Lease)
}

// Health says whether events are moving now (see Health). Safe to call
// concurrently with Run.
func (r *Relay) Health() Health { return r.progress.health(r.clock.Now()) }

// maxOutagePause caps how long the claimer waits between attempts while the
// broker is unreachable, so publishing resumes within seconds of its return.
const maxOutagePause = 5 * time.Second

// publishBatch publishes one claimed batch, settles what it could not
// publish, and reports whether it hit an outage (a publish that delivered
// nothing because the broker did not answer).
func (r *Relay) publishBatch(ctx, work context.Context, b claimed) bool {
	defer r.gate.settled()
	r.hb.begin(b.no, b.Claimed)
	br := newBatchRun(b, r.lease.Lease)
	maxBytes := r.pub.MaxBatchBytes()
	for br.next < len(br.rows) {
		if ctx.Err() != nil || work.Err() != nil {
			// Shutdown: what was not sent yet goes back at once.
			br.abandon(r.hb, whyUnsent)
			break
		}
		r.keepLease(br)
		failed := len(br.failures)
		msgs, rows := br.nextChunk(r.hb, maxBytes, r.message)
		var began time.Time
		if r.att != nil {
			// Failed without a publish call (too large, undecodable).
			began = r.clock.Now()
			br.stamp(failed, began, began)
		}
		if len(msgs) == 0 {
			continue
		}
		failed = len(br.failures)
		errs, callErr, cutOff := r.publishChunk(work, br.deadline, msgs, rows)
		delivered := br.record(r.hb, rows, errs, cutOff)
		var ended time.Time
		if r.att != nil {
			ended = r.clock.Now()
			br.stamp(failed, began, ended)
		}
		r.record(report{kind: reportPublished, rows: delivered, began: began, ended: ended})
		if len(delivered) > 0 {
			r.marks.put(b.Token, seqsOf(delivered), markDelay(&r.cfg))
		}
		if callErr != nil && br.delivered == 0 && allOutage(errs) {
			// Nothing got through, for a condition of the cluster: stop
			// this batch and hold the claimer back until it passes.
			br.abandon(r.hb, whyUnsent)
			br.outage = true
		}
	}
	r.settle(br)
	return br.outage
}

// settle gives back what the batch did not publish: failed rows with their
// backoff or as dead letters, held-back and unsent rows at once. It records
// what was given back in the hold-back state and, if anything was, asks the
// claimer to let the pipeline settle before its next claim (claimGate).
func (r *Relay) settle(br *batchRun) {
	gave, stuck := r.settleFailures(br.b.Token, br.failures)
	if len(br.returned) > 0 {
		rows := make([]lease.Row, len(br.returned))
		held := int64(0)
		for i, ret := range br.returned {
			rows[i] = ret.row
			if ret.why != whyUnsent {
				held++
			}
		}
		r.record(report{kind: reportHeldBack, n: int(held)})
		if ce := r.log.Check(zap.DebugLevel, "giving back events"); ce != nil {
			ce.Write(zap.Int("events", len(rows)), zap.Int64("held_back", held), zap.String("first_reason", br.returned[0].why), zap.Uint64("claim_no", br.b.no))
		}
		if err := r.release(lease.Settle{Token: br.b.Token, Seqs: seqsOf(rows)}); err != nil {
			stuck = append(stuck, rows...)
		} else {
			gave = append(gave, rows...)
		}
	}
	if len(gave) > 0 {
		// The statements above committed; every claim started until now
		// may hold later events of these aggregates without them.
		r.hb.gaveBack(gave, r.gate.lastStarted())
	}
	var busyUntil time.Time
	for i := range stuck {
		r.hb.stuck(&stuck[i], br.deadline)
		busyUntil = br.deadline.Add(stuckMargin)
	}
	r.claimer.Settled(br.b.Token, busyUntil)
	if len(gave)+len(stuck) > 0 {
		r.gate.flush()
	}
	// A batch that delivered events and had no failure ends a failure
	// episode; one whose events were all held back does not.
	r.fails.flush(r.clock.Now(), br.delivered > 0 && len(br.failures) == 0 && !br.outage)
}

// settleFailures gives failed rows back with a per-row backoff and their
// error, or dead-letters them: at once when the record can never be
// published (deadAtOnce), or when the attempt just made was their
// MaxAttempts-th. Failures for a condition of the cluster (kafka.IsOutage:
// unreachable, not enough replicas, no leader, timeouts, ...) do not count
// as attempts: they never make a dead letter. Rows with the same outcome, delay and error share a statement.
// It returns the rows it gave back and those it could not (stuck: still
// leased by this relay until the lease ends).
func (r *Relay) settleFailures(token uuid.UUID, fs []failure) (gave, stuck []lease.Row) {
	if len(fs) == 0 {
		return nil, nil
	}
	type key struct {
		dead     bool
		count    bool
		attempts int
		msg      string
	}
	groups := map[key][]lease.Row{}
	var order []key
	for _, f := range fs {
		count := !kafka.IsOutage(f.err)
		attempts := f.row.Attempts
		if count {
			attempts++
		}
		dead := deadAtOnce(f.err) || attempts >= r.cfg.MaxAttempts
		r.record(report{kind: reportFailed, failure: &f, topic: r.topicOf(&f.row), dead: dead, attempts: attempts})
		k := key{dead: dead, count: count, attempts: attempts, msg: f.err.Error()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f.row)
	}
	for _, k := range order {
		rows := groups[k]
		s := lease.Settle{Token: token, Seqs: seqsOf(rows), CountAttempt: k.count, LastError: k.msg}
		var err error
		if k.dead {
			s.Hold = r.cfg.OnDeadLetter == DeadLetterHold
			err = r.deadLetter(s)
		} else {
			s.RetryIn = backoff.Delay(r.cfg.RetryMin, r.cfg.RetryMax, max(k.attempts, 1))
			err = r.release(s)
		}
		if err != nil {
			stuck = append(stuck, rows...)
		} else {
			gave = append(gave, rows...)
		}
	}
	return gave, stuck
}

func (r *Relay) deadLetter(s lease.Settle) error {
	rctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
	defer cancel()
	n, err := r.claimer.DeadLetter(rctx, s)
	if err != nil {
		if r.stop.stopping() {
			r.stop.failedRelease(len(s.Seqs), err)
			return err
		}
		r.log.Warn("dead-letter failed; the events come back when their lease ends", zap.Error(err), zap.Int("events", len(s.Seqs)))
		return err
	}
	r.record(report{kind: reportDeadLettered, n: int(n)})
	return nil
}

// releaseBatch gives a whole batch back unpublished (the relay is
// stopping) and tells the claimer it is settled.
func (r *Relay) releaseBatch(b *lease.Batch) {
	var busyUntil time.Time
	if err := r.release(lease.Settle{Token: b.Token, Seqs: seqsOf(b.Rows)}); err != nil {
		busyUntil = b.Deadline(r.lease.Lease).Add(stuckMargin)
	}
	r.claimer.Settled(b.Token, busyUntil)
}

// release gives rows back. A release must happen even once the in-flight
// publish was cut off by the shutdown timeout: each attempt is bounded on
// its own, and tried again a couple of times, since a transient database
// error must not leave the rows held until their lease ends; a stopping
// relay stops trying at ShutdownGrace after the shutdown timeout.
func (r *Relay) release(s lease.Settle) error {
	if len(s.Seqs) == 0 {
		return nil
	}
	var err error
	for attempt := 1; attempt <= 3 && r.stop.final.Err() == nil; attempt++ {
		rctx, cancel := context.WithTimeout(r.stop.final, r.cfg.DBTimeout)
		var n int64
		n, err = r.claimer.Release(rctx, s)
		cancel()
		if err == nil {
			r.record(report{kind: reportReleased, n: int(n)})
			if ce := r.log.Check(zap.DebugLevel, "released"); ce != nil {
				ce.Write(zap.Int("events", len(s.Seqs)), zap.Int64("released", n), zap.Duration("retry_in", s.RetryIn), zap.Stringer("claim_token", s.Token))
			}
			return nil
		}
		r.clock.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
	}
	if err == nil {
		err = r.stop.final.Err()
	}
	if r.stop.stopping() {
		r.stop.failedRelease(len(s.Seqs), err)
		return err
	}
	r.log.Warn("release failed; the events come back when their lease ends", zap.Error(err), zap.Int("events", len(s.Seqs)))
	return err
}
