package relay

import "time"

// wakeCause is why the claimer claimed.
type wakeCause int

const (
	causeBacklog wakeCause = iota // at once: start, a full claim, after a failure
	causeNotify                   // a notification
	causePoll                     // the fallback poll ticker
	causeWindow                   // a claim inside the claim window
)

// unnotifiedFor is how long the relay keeps polling the whole claim window
// densely after the last sign of events committed without a notification
// of their own (see windowMode). Long, so that a workload that shows such
// events now and then (a debounced writer committing two transactions
// within 20ms every few seconds next to a steady notifying one) stays
// dense: with 1s, the second transaction of such pairs waited up to 21ms
// (p99 19 ms) instead of 3 ms.
const unnotifiedFor = 10 * time.Second

// windowMode decides how densely the relay claims inside the claim window
// after a claim that found events (Config.ClaimWindow).
//
// The window exists for events whose transaction carried no notification
// because its writer had notified less than outbox.WriterConfig's
// WakeupInterval (20ms) before (outbox.WakeupDebounced), or that come from
// a writer that never notifies. While such events arrive, the window is
// polled every ClaimWindowPoll (dense). When every event comes with its own
// notification (a writer process committing less than once per 20ms: at
// 10 events/s, for example) those polls only come back empty, about a
// dozen per event; the window then shrinks to one claim ClaimWindow after
// the first hit, and, if that one comes back empty and events were found
// since, one more ClaimWindow after the last hit (sparse). Those still
// find an event that came without a notification, at most ClaimWindow
// (25ms) late, and turn the dense mode back on.
//
// The sign is a claim that was not triggered by a notification (a window
// or poll claim) and found events. The mode is dense for unnotifiedFor
// (10s) after the last one; a new relay starts sparse.
type windowMode struct {
	lastUnnotified time.Time
}

// found records a claim that found events, woken by cause.
func (m *windowMode) found(cause wakeCause, now time.Time) {
	if cause == causeWindow || cause == causePoll {
		m.lastUnnotified = now
	}
}

// dense reports whether the window is polled every ClaimWindowPoll at now.
func (m *windowMode) dense(now time.Time) bool {
	return !m.lastUnnotified.IsZero() && now.Sub(m.lastUnnotified) < unnotifiedFor
}
