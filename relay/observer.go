package relay

import (
	"time"

	"github.com/pgoutbox/outbox/lease"
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
	Published(rows []lease.Row)
	// Marked is called after each mark statement with its duration, the
	// rows it tried to mark, how many it marked (fewer: the lease was lost)
	// and its error.
	Marked(d time.Duration, rows int, marked int64, err error)
	// PublishFailed is called for each event whose publish failed, with its
	// destination topic, the error (see kafka.Classify) and whether it was
	// dead-lettered.
	PublishFailed(row lease.Row, topic string, err error, deadLettered bool)
}

// ObserverFuncs implements Observer with optional functions; nil fields are
// skipped.
type ObserverFuncs struct {
	OnClaimed       func(d time.Duration, rows, takenOver int, err error)
	OnPublished     func(rows []lease.Row)
	OnMarked        func(d time.Duration, rows int, marked int64, err error)
	OnPublishFailed func(row lease.Row, topic string, err error, deadLettered bool)
}

// Claimed implements Observer.
func (f ObserverFuncs) Claimed(d time.Duration, rows, takenOver int, err error) {
	if f.OnClaimed != nil {
		f.OnClaimed(d, rows, takenOver, err)
	}
}

// Published implements Observer.
func (f ObserverFuncs) Published(rows []lease.Row) {
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
func (f ObserverFuncs) PublishFailed(row lease.Row, topic string, err error, deadLettered bool) {
	if f.OnPublishFailed != nil {
		f.OnPublishFailed(row, topic, err, deadLettered)
	}
}

// Observers returns an Observer that calls each non-nil one of obs in
// order.
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

func (m multiObserver) Published(rows []lease.Row) {
	for _, o := range m {
		o.Published(rows)
	}
}

func (m multiObserver) Marked(d time.Duration, rows int, marked int64, err error) {
	for _, o := range m {
		o.Marked(d, rows, marked, err)
	}
}

func (m multiObserver) PublishFailed(row lease.Row, topic string, err error, deadLettered bool) {
	for _, o := range m {
		o.PublishFailed(row, topic, err, deadLettered)
	}
}
