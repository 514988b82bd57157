package relay

import (
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
)

// Observer is told what the relay does, for metrics, tests and benchmarks.
// The relay calls it from its claimer, publisher and marker goroutines,
// concurrently, on the hot path: implementations must be fast, must not
// block and must be safe for concurrent use. metrics.Metrics implements it;
// ObserverFuncs adapts plain functions; Observers combines several.
type Observer interface {
	// Claimed is called after each claim with its duration, the rows it
	// leased, how many of them were taken over from an expired lease, and
	// its error (rows 0 then).
	Claimed(d time.Duration, rows, takenOver int, err error)
	// Published is called after each publish with the rows Kafka
	// acknowledged (acks=all), before they are marked.
	Published(rows []claim.Row)
	// Marked is called after each mark statement with its duration, the
	// rows it tried to mark, how many it marked (fewer: the lease was lost)
	// and its error.
	Marked(d time.Duration, rows int, marked int64, err error)
	// PublishFailed is called for each event whose publish failed, with its
	// destination topic, the error and whether it was dead-lettered.
	PublishFailed(row claim.Row, topic string, err error, deadLettered bool)
}

// Outcome is what became of one publish attempt of an event (Attempt).
type Outcome string

// Attempt.Outcome values.
const (
	// OutcomePublished: Kafka acknowledged the event (acks=all).
	OutcomePublished Outcome = "published"
	// OutcomeRetried: the publish failed and the event is given back, to
	// be published again after its backoff (Config.RetryMin doubling up to
	// Config.RetryMax) or, for an outage (a condition of the cluster), once the
	// cluster takes records again.
	OutcomeRetried Outcome = "retried"
	// OutcomeDeadLettered: the publish failed for good and the event is
	// parked as a dead letter: a record the broker refuses as it is, a
	// row that cannot become a record, or Config.MaxAttempts reached.
	OutcomeDeadLettered Outcome = "dead_lettered"
)

// Attempt is one publish attempt of one event, as an AttemptObserver is
// told it.
type Attempt struct {
	// Row is the event's row. It points into the relay's batch: read it
	// during the call only.
	Row *claim.Row
	// Topic is the event's destination topic (see route).
	Topic string
	// Partition is the partition the event was (or, failing before it was
	// sent, would be) sent to, as the Kafka publisher says. -1 when
	// unknown: the Publisher does not say (one the relay did not build, or
	// that wraps it: ServiceConfig.WrapPublisher), or it has not written
	// to the topic yet.
	Partition int
	// Began and Ended bound the publish call that carried the event, by
	// this host's clock. Both are the time of the failure when no call
	// carried it: a row that cannot become a record.
	Began, Ended time.Time
	// Outcome is what became of the event; Err the failure, nil when it
	// was published.
	Outcome Outcome
	Err     error
	// Reason is Err's reason from a small fixed set, for metrics labels
	// and traces' error.type ("unreachable", "message_too_large",
	// "not_leader", ..., "other"); "" when the event was published.
	Reason string
	// Attempts counts the event's failed attempts that count toward
	// Config.MaxAttempts, this one included (an outage counts none).
	Attempts int
}

// AttemptObserver is an Observer that is also told each publish attempt
// of each event, with where it went and when the call ran: what a trace
// of the event needs (NewTracingObserver) and the calls of Observer do
// not carry. The relay looks for it once, in New, on Config.Observer and
// among the observers combined by Observers; when there is none, it
// builds no Attempt, and the publish path costs what it costs without.
type AttemptObserver interface {
	Observer
	// Attempted is called from the publisher goroutine: for an event
	// Kafka acknowledged, right after the publish call that carried it
	// returned (before Published); for a failed one, when its batch is
	// settled (before PublishFailed). Like every Observer method it must
	// be fast and must not block.
	Attempted(a Attempt)
}

// attempter is what the relay calls for each Attempt: the
// AttemptObservers found in Config.Observer.
type attempter interface{ Attempted(a Attempt) }

// attemptObserverOf returns the AttemptObservers in o (itself, or among
// those Observers combined), or nil when there is none.
func attemptObserverOf(o Observer) attempter {
	switch o := o.(type) {
	case multiObserver:
		var out attempters
		for _, m := range o {
			if a := attemptObserverOf(m); a != nil {
				out = append(out, a)
			}
		}
		switch len(out) {
		case 0:
			return nil
		case 1:
			return out[0]
		}
		return out
	case AttemptObserver:
		return o
	}
	return nil
}

type attempters []attempter

func (as attempters) Attempted(a Attempt) {
	for _, o := range as {
		o.Attempted(a)
	}
}

// ObserverFuncs implements Observer with optional functions; nil fields are
// skipped.
type ObserverFuncs struct {
	OnClaimed       func(d time.Duration, rows, takenOver int, err error)
	OnPublished     func(rows []claim.Row)
	OnMarked        func(d time.Duration, rows int, marked int64, err error)
	OnPublishFailed func(row claim.Row, topic string, err error, deadLettered bool)
}

// Claimed implements Observer.
func (f ObserverFuncs) Claimed(d time.Duration, rows, takenOver int, err error) {
	if f.OnClaimed != nil {
		f.OnClaimed(d, rows, takenOver, err)
	}
}

// Published implements Observer.
func (f ObserverFuncs) Published(rows []claim.Row) {
	if f.OnPublished != nil {
		f.OnPublished(rows)
	}
}

// Marked implements Observer.
func (f ObserverFuncs) Marked(d time.Duration, rows int, marked int64, err error) {
	if f.OnMarked != nil {
		f.OnMarked(d, rows, marked, err)
	}
}

// PublishFailed implements Observer.
func (f ObserverFuncs) PublishFailed(row claim.Row, topic string, err error, deadLettered bool) {
	if f.OnPublishFailed != nil {
		f.OnPublishFailed(row, topic, err, deadLettered)
	}
}

// Observers returns an Observer that calls each non-nil one of obs in
// order; the AttemptObservers among them are told the attempts too.
func Observers(obs ...Observer) Observer {
	var out multiObserver
	for _, o := range obs {
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

type multiObserver []Observer

func (m multiObserver) Claimed(d time.Duration, rows, takenOver int, err error) {
	for _, o := range m {
		o.Claimed(d, rows, takenOver, err)
	}
}

func (m multiObserver) Published(rows []claim.Row) {
	for _, o := range m {
		o.Published(rows)
	}
}

func (m multiObserver) Marked(d time.Duration, rows int, marked int64, err error) {
	for _, o := range m {
		o.Marked(d, rows, marked, err)
	}
}

func (m multiObserver) PublishFailed(row claim.Row, topic string, err error, deadLettered bool) {
	for _, o := range m {
		o.PublishFailed(row, topic, err, deadLettered)
	}
}
