package relay

import "time"

// unannounced tells when events are found only by the fallback poll: the
// claims the poll ticker woke found events several times in a row, and no
// claim a notification woke found any in between. Notifications work when
// the writers notify the channel the relay LISTENs on; a writer that
// notifies another channel (a --channel or writer option that differs) or
// none (plain SQL without pg_notify) leaves every event to the poll, at up
// to a poll interval of latency each, while readiness stays true (events
// are moving). The relay logs a warning, once per unannouncedEvery.
//
// It belongs to the claimer goroutine; it is not safe for concurrent use.
type unannounced struct {
	inARow int       // poll-woken claims in a row that found events
	warned time.Time // when the last warning was due
}

const (
	// unannouncedAfter poll-woken claims in a row that found events make
	// a warning due.
	unannouncedAfter = 3
	// unannouncedEvery is the least time between two warnings.
	unannouncedEvery = 10 * time.Minute
)

// claimed records a claim woken by cause that found rows events, at now,
// and reports whether a warning is due.
func (u *unannounced) claimed(cause wakeCause, rows int, now time.Time) bool {
	if rows == 0 {
		return false
	}
	switch cause {
	case causeNotify:
		u.inARow = 0
	case causePoll:
		u.inARow++
		if u.inARow >= unannouncedAfter && (u.warned.IsZero() || now.Sub(u.warned) >= unannouncedEvery) {
			u.warned = now
			return true
		}
	}
	return false
}
