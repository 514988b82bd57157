package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// Publisher is what the relay needs from a Kafka producer;
// *produce.Publisher (internal/produce) implements it. It names that
// package's Result: it is for the project's own tests (outboxtest, the
// fault tests) through ServiceConfig.WrapPublisher, not for applications.
type Publisher interface {
	// Publish publishes msgs in order and returns what became of each,
	// one produce.Result per message: published, to retry (counting an
	// attempt or, for a condition of the cluster, not), dead letter, or
	// not sent (held behind a failed message of its key, or the call
	// stopped). produce.Path cuts the messages into produce requests.
	Publish(ctx context.Context, msgs []kafka.Message) []produce.Result
}

// Claimer is what the relay needs from the lease store; *claim.Claimer
// (internal/claim) implements it. It names that package's types: it is for
// the project's own tests (ServiceConfig.WrapClaimer in the fault tests),
// not for applications.
type Claimer interface {
	// Claim also marks published, in the claim's transaction, the rows of
	// marks (claim.Claimer.Claim).
	Claim(ctx context.Context, marks ...*claim.Mark) (*claim.Batch, error)
	MarkPublished(ctx context.Context, token uuid.UUID, seqs []int64) (int64, error)
	Extend(ctx context.Context, token uuid.UUID, seqs []int64) ([]int64, time.Duration, error)
	Release(ctx context.Context, s claim.Settle) (int64, error)
	DeadLetter(ctx context.Context, s claim.Settle) (int64, error)
	// Settled says the relay is done with a claimed batch (its rows
	// published, given back or dead-lettered; rows it could not give back
	// stay leased until busyUntil): the claimer gives a key partition to
	// another relay only once no unsettled batch holds rows of it.
	Settled(token uuid.UUID, busyUntil time.Time)
	// PollShared makes the next Claim also wake the owners of the other
	// relays' claimable rows (claim.Claimer.PollShared): the relays take
	// turns at the fallback poll.
	PollShared()
	// Ownership says which key partitions the claimer owns.
	Ownership() claim.Ownership
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
	// Key partitions (claim.Ownership): how many this relay owns now, of
	// how many, among how many relays; how many it acquired, gave back,
	// and acquired from another relay (handovers).
	OwnedPartitions, Partitions, Relays               int64
	PartitionsAcquired, PartitionsReleased, Handovers int64
	// Member is this relay's member name in the table's relays
	// (claim.Claimer.Member): the owner name of its key partitions.
	Member string
}

// Relay is the engine that moves events from the outbox table to Kafka:
// the claim, publish and mark pipeline (pipeline.go). Applications run it
// through a Service (NewService) and read its Stats and Health through
// Service.Relay; New is for the project's own tests, which give it a
// claimer and a publisher of their choice.
type Relay struct {
	cfg     Config
	lease   lease.Config
	claimer Claimer
	pub     Publisher
	wake    <-chan struct{}
	// untargeted, if set (Service: listen.Listener.Untargeted), counts
	// the notifications that named no key partitions (scheduler.wait).
	untargeted func() int64
	// releasing is the number of key partitions the claimer was giving
	// back at its last claim (recordOwnership); tellSettled wakes the claimer
	// through settledKick (one slot) while it is above 0, so that a
	// partition whose last batch settled is given back at once: no
	// notification of its events wakes this relay for that.
	releasing   atomic.Int32
	settledKick chan struct{}
	log         *zap.Logger
	obs         Observer
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
	// replacedLogged and takeoverLogged: the static-membership log lines
	// (recordOwnership) were written. Claimer goroutine only.
	replacedLogged, takeoverLogged bool
	// ownedShare is the part of the key partitions the claimer owned at
	// the last claim (0 until it owns some): the claim schedule's busy
	// threshold is the table's rate (busy). Claimer goroutine only.
	ownedShare float64
	// pollTurn and pollOf are the claimer's Ownership.Turn and Members at
	// the last claim: with notifications, relays take turns at the
	// fallback poll (scheduler.pollDelay). Claimer goroutine only.
	pollTurn, pollOf int
	// wakeups, if set (Service: listen.Listener.Wakeups), counts the
	// wake-ups signalled and those sent by another relay's shared poll;
	// listening (Service) says whether the listener's LISTEN is up.
	wakeups   func() (all, poll int64)
	listening func() bool
	// clock is every time reading, timer and sleep of the relay (clock.go;
	// the model tests replace it).
	clock clock

	// stats are the Stats counters (record.go).
	stats counters
}

// New returns a Relay. wake delivers wake-up signals (listen.Listener.Wake);
// nil means poll only: the relay then claims every PollInterval and does not
// linger. It returns cfg's validation error, or an error when the
// publisher's attempt budget (produce.Publisher.AttemptBudget: attempts ×
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
		att:         attemptObserverOf(obs),
		settledKick: make(chan struct{}, 1),
		gate:        newClaimGate(), hb: newHoldback(), marks: newMarkQueue(realClock{}), fails: newFailureLog(log, failureLogEvery), stop: newShutdown(),
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
