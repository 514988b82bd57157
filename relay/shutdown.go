package relay

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ShutdownGrace is how long after Config.ShutdownTimeout a stopping relay
// still gives back what it holds — marks the events Kafka acknowledged,
// releases the rest, leaves its key partitions — before Run returns
// whatever the database does. Every database statement the relay runs
// once its context is done ends by then, so that connections that hang
// (a network partition, a server that stopped answering) cannot hold the
// stop for each statement's own bound (Config.DBTimeout, three times for
// a release): an orchestrator's grace period of ShutdownTimeout plus 2 s
// covers the whole stop.
const ShutdownGrace = time.Second

// shutdown is what a stopping relay could not do, for the one line Run
// logs at the end (logTo), and the context that bounds its last
// statements.
type shutdown struct {
	// final is done ShutdownTimeout+ShutdownGrace after Run's context
	// is: every statement derives from it (claims, marks, releases,
	// dead letters, lease extensions, leaving). Until Run's context is
	// done it is never done.
	final context.Context
	mu    sync.Mutex
	began time.Time // when Run's context was done; zero while running
	// unreleased counts events whose release or dead-letter failed
	// while stopping (they stay leased until their lease ends), unmarked
	// delivered events whose mark failed (published again after their
	// lease); claimLost is set when a claim in flight failed (it may
	// have committed, its answer lost); leaveErr when leaving the key
	// partitions failed.
	unreleased, unmarked int
	claimLost            bool
	leaveErr             error
	lastErr              error
}

func newShutdown() *shutdown { return &shutdown{final: context.Background()} }

// begin records when the stop began.
func (s *shutdown) begin(now time.Time) {
	s.mu.Lock()
	s.began = now
	s.mu.Unlock()
}

// stopping reports whether the relay is stopping: then failures are
// summed up for the last line instead of logged one by one.
func (s *shutdown) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.began.IsZero()
}

// failedRelease records events a stopping relay could not give back.
func (s *shutdown) failedRelease(events int, err error) {
	s.mu.Lock()
	s.unreleased += events
	s.lastErr = err
	s.mu.Unlock()
}

// failedMark records delivered events a stopping relay could not mark.
func (s *shutdown) failedMark(events int, err error) {
	s.mu.Lock()
	s.unmarked += events
	s.lastErr = err
	s.mu.Unlock()
}

// failedClaim records a claim that failed while the relay was stopping.
func (s *shutdown) failedClaim(err error) {
	s.mu.Lock()
	s.claimLost = true
	s.lastErr = err
	s.mu.Unlock()
}

// failedLeave records that leaving the key partitions failed.
func (s *shutdown) failedLeave(err error) {
	s.mu.Lock()
	s.leaveErr = err
	s.lastErr = err
	s.mu.Unlock()
}

// logTo logs the end of the stop: "relay stopped", or, when something
// could not be given back, one warning saying what stays as it is and
// until when; now is the time the stop ends.
func (s *shutdown) logTo(log *zap.Logger, now time.Time, lease time.Duration, published int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	took := time.Duration(0)
	if !s.began.IsZero() {
		took = now.Sub(s.began)
	}
	if s.unreleased == 0 && s.unmarked == 0 && !s.claimLost && s.leaveErr == nil {
		log.Info("relay stopped", zap.Int64("published", published), zap.Duration("took", took))
		return
	}
	var what []string
	if s.unreleased > 0 {
		what = append(what, fmt.Sprintf("%d events stay leased until their lease ends (at most %s): another relay, or this one restarted, publishes them then", s.unreleased, lease))
	}
	if s.unmarked > 0 {
		what = append(what, fmt.Sprintf("%d events Kafka acknowledged are not marked published: they are published again after their lease", s.unmarked))
	}
	if s.claimLost {
		what = append(what, "a claim got no answer: if the database committed it, its events stay leased until their lease ends (at most "+lease.String()+")")
	}
	if s.leaveErr != nil {
		what = append(what, "this relay's membership stays until it ends (at most "+lease.String()+"): the key partitions it owns, if any, move to the other relays then")
	}
	log.Warn("shutdown incomplete (the database refused or did not answer in time; last_error says which): "+strings.Join(what, "; "),
		zap.Int("unreleased", s.unreleased), zap.Int("unmarked", s.unmarked), zap.Bool("claim_lost", s.claimLost), zap.Bool("left", s.leaveErr == nil),
		zap.Duration("took", took), zap.Int64("published", published), zap.NamedError("last_error", s.lastErr))
}
