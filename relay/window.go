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
// dense, and the second transaction of such pairs does not wait for a
// sparse window claim (docs/internals.md, "Wake-ups").
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
// or poll claim), began with no notification pending, found events, and
// was not followed by a notification within notifyGrace (a notification
// is delivered at its transaction's commit, so one that was on its way
// while such a claim ran arrives within a millisecond or so: at 10 events/s
// about one window claim in twenty met a commit that way, and counting
// those kept the window dense). The mode is dense for unnotifiedFor (10s)
// after the last sign; a new relay starts sparse.
type windowMode struct {
	lastUnnotified time.Time
	// suspect is when a claim found events no notification had announced;
	// it becomes a sign unless a notification arrives within notifyGrace.
	suspect time.Time
}

// notifyGrace: see windowMode.
const notifyGrace = 10 * time.Millisecond

// found records a claim that found events at now; unnotified says it was
// a window or poll claim that began with no notification pending.
func (m *windowMode) found(unnotified bool, now time.Time) {
	if unnotified && m.suspect.IsZero() {
		m.suspect = now
	}
}

// notified records a notification at now: events found just before came
// with one after all.
func (m *windowMode) notified(now time.Time) {
	if !m.suspect.IsZero() && now.Sub(m.suspect) < notifyGrace {
		m.suspect = time.Time{}
	}
}

// advance brings m to now: a suspect older than notifyGrace, not
// announced by a notification since, becomes a sign. The schedule
// advances the mode each time it asks dense.
func (m *windowMode) advance(now time.Time) {
	if !m.suspect.IsZero() && now.Sub(m.suspect) >= notifyGrace {
		m.lastUnnotified, m.suspect = m.suspect, time.Time{}
	}
}

// dense reports whether the window is polled every ClaimWindowPoll at now,
// by the signs m holds (advance first to count a suspect that became one).
func (m windowMode) dense(now time.Time) bool {
	return !m.lastUnnotified.IsZero() && now.Sub(m.lastUnnotified) < unnotifiedFor
}
