package relay

import (
	"testing"
	"time"
)

// TestWindowModeFollowsEventsWithoutNotifications: the claim window is
// sparse while every event found came with a notification, dense for 10s
// after a window or poll claim found events, and sparse again after that.
func TestWindowModeFollowsEventsWithoutNotifications(t *testing.T) {
	var m windowMode
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		name  string
		cause wakeCause
		found bool
		at    int
		dense bool
	}{
		{"a new relay", 0, false, 0, false},
		{"a notified event", causeNotify, true, 10, false},
		{"a backlog claim", causeBacklog, true, 20, false},
		{"the window's claim finds an event without a notification", causeWindow, true, 35, true},
		{"notified events meanwhile", causeNotify, true, 5000, true},
		{"ten seconds later", 0, false, 10034, true},
		{"just after", 0, false, 10036, false},
		{"a poll finds an event without a notification", causePoll, true, 20000, true},
		{"ten seconds later", 0, false, 30001, false},
	}
	for _, s := range steps {
		if s.found {
			m.found(s.cause, at(s.at))
		}
		if got := m.dense(at(s.at)); got != s.dense {
			t.Errorf("%s (at %dms): dense = %v, want %v", s.name, s.at, got, s.dense)
		}
	}
}
