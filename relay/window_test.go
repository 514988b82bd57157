package relay

import (
	"testing"
	"time"
)

// TestWindowModeFollowsEventsWithoutNotifications: the claim window is
// sparse while every event found came with a notification; a window or
// poll claim that found events makes it dense for 10s, unless a
// notification arrives within notifyGrace (it announced those events);
// then it is sparse again.
func TestWindowModeFollowsEventsWithoutNotifications(t *testing.T) {
	var m windowMode
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		name       string
		found      bool // a claim found events
		unnotified bool // ... as a window or poll claim with no notification pending
		notify     bool // a notification arrives
		at         int
		dense      bool
	}
	steps := []step{
		{name: "a new relay", at: 0, dense: false},
		{name: "a notified event", found: true, at: 10, dense: false},
		{name: "a window claim finds an event", found: true, unnotified: true, at: 35, dense: false},
		{name: "its notification arrives 2 ms later", notify: true, at: 37, dense: false},
		{name: "later: it was announced", at: 60, dense: false},
		{name: "a window claim finds an event nobody announced", found: true, unnotified: true, at: 100, dense: false},
		{name: "a notification 11 ms later is another event's", notify: true, at: 111, dense: true},
		{name: "notified events meanwhile", found: true, at: 5000, dense: true},
		{name: "ten seconds after the sign", at: 10099, dense: true},
		{name: "just after", at: 10101, dense: false},
		{name: "a poll finds an event nobody announced", found: true, unnotified: true, at: 20000, dense: false},
		{name: "no notification within the grace", at: 20010, dense: true},
		{name: "a second sign inside the dense period extends it", found: true, unnotified: true, at: 25000, dense: true},
		{name: "ten seconds after the first sign", at: 30011, dense: true},
		{name: "ten seconds after the second", at: 35011, dense: false},
	}
	for _, s := range steps {
		if s.found {
			m.found(s.unnotified, at(s.at))
		}
		if s.notify {
			m.notified(at(s.at))
		}
		m.advance(at(s.at))
		if got := m.dense(at(s.at)); got != s.dense {
			t.Errorf("%s (at %dms): dense = %v, want %v", s.name, s.at, got, s.dense)
		}
	}
}
