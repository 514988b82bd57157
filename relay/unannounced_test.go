package relay

import (
	"testing"
	"time"
)

func TestUnannouncedWarnsWhenOnlyThePollFindsEvents(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		cause wakeCause
		rows  int
		at    time.Duration
		warn  bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"three poll finds warn", []step{{causePoll, 1, 0, false}, {causePoll, 2, time.Second, false}, {causePoll, 1, 2 * time.Second, true}}},
		{"empty polls do not count", []step{{causePoll, 1, 0, false}, {causePoll, 0, 1, false}, {causePoll, 0, 2, false}, {causePoll, 1, 3, false}}},
		{"a notified find starts over", []step{{causePoll, 1, 0, false}, {causePoll, 1, 1, false}, {causeNotify, 1, 2, false},
			{causePoll, 1, 3, false}, {causePoll, 1, 4, false}, {causePoll, 1, 5, true}}},
		{"an empty notified claim does not", []step{{causePoll, 1, 0, false}, {causePoll, 1, 1, false}, {causeNotify, 0, 2, false}, {causePoll, 1, 3, true}}},
		{"window and backlog claims are neither", []step{{causePoll, 1, 0, false}, {causeWindow, 5, 1, false}, {causeBacklog, 5, 2, false},
			{causePoll, 1, 3, false}, {causePoll, 1, 4, true}}},
		{"once per ten minutes", []step{{causePoll, 1, 0, false}, {causePoll, 1, 1, false}, {causePoll, 1, 2, true},
			{causePoll, 1, time.Minute, false}, {causePoll, 1, 9 * time.Minute, false}, {causePoll, 1, 10*time.Minute + 2, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u unannounced
			for i, s := range tc.steps {
				if got := u.claimed(s.cause, s.rows, t0.Add(s.at)); got != s.warn {
					t.Fatalf("step %d (%+v): warn %v, want %v", i, s, got, s.warn)
				}
			}
		})
	}
}
