package relay

import (
	"testing"
	"time"
)

// TestSchedule runs the claim schedule (schedConfig.next) through its
// modes, event by event, and checks each decision: no database, no
// timers, no clock.
func TestSchedule(t *testing.T) {
	cfg := schedConfig{batchSize: 100, window: 25 * time.Millisecond, windowPoll: 500 * time.Microsecond, busyGap: 20 * time.Millisecond}
	targeting := cfg
	targeting.targeting = true
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	woke := func(us int, c wakeCause) schedEvent { return schedEvent{kind: schedWoke, at: at(us), cause: c} }
	begin := func(us int, drained bool) schedEvent {
		return schedEvent{kind: schedBegin, at: at(us), drained: drained}
	}
	found := func(us, rows int) schedEvent { return schedEvent{kind: schedClaimed, at: at(us), rows: rows} }
	failed := func(us int) schedEvent { return schedEvent{kind: schedFailed, at: at(us)} }
	linger := func(d time.Duration) schedDecision { return schedDecision{linger: true, lingerIn: d} }
	polled := schedDecision{poll: true}
	none := schedDecision{}
	type step struct {
		e    schedEvent
		want schedDecision
		any  bool // the decision is not checked
	}
	// A claim woken at us by c that begins at once and comes back with
	// rows at us+100, owning share of the key partitions (0: unknown).
	claimShare := func(us int, c wakeCause, drained bool, rows int, share float64, want schedDecision) []step {
		e := found(us+100, rows)
		e.share = share
		return []step{{e: woke(us, c), any: true}, {e: begin(us, drained), want: polled}, {e: e, want: want}}
	}
	claim := func(us int, c wakeCause, drained bool, rows int, want schedDecision) []step {
		return claimShare(us, c, drained, rows, 0, want)
	}
	cat := func(ss ...[]step) []step {
		var out []step
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	cases := []struct {
		name    string
		cfg     schedConfig
		steps   []step
		backlog bool // the state after the last step claims at once
		dense   bool // ... and polls the window densely at the last step
	}{
		{
			name: "a new relay claims at once, then waits",
			steps: []step{
				{e: woke(0, causeBacklog), want: none}, {e: begin(0, false), want: polled}, {e: found(100, 0), want: none},
			},
		},
		{
			name:    "a full claim is a backlog: the next claims at once",
			steps:   claim(0, causeBacklog, false, 100, none),
			backlog: true,
		},
		{
			name:    "a claim stopped by its byte bound is a backlog too",
			steps:   []step{{e: woke(0, causeBacklog), want: none}, {e: begin(0, false), want: polled}, {e: schedEvent{kind: schedClaimed, at: at(100), rows: 3, more: true}, want: none}},
			backlog: true,
		},
		{
			name:    "an empty claim that says more (ownership moved) claims again at once",
			steps:   []step{{e: woke(0, causeBacklog), want: none}, {e: begin(0, false), want: polled}, {e: schedEvent{kind: schedClaimed, at: at(100), rows: 0, more: true}, want: none}},
			backlog: true,
		},
		{
			name: "a notification right after a claim waits ClaimWindowPoll after it (debounce)",
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: woke(200, causeNotify), want: schedDecision{notBefore: at(500)}},
			}),
		},
		{
			name: "a notification long after the last claim claims at once",
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: woke(9000, causeNotify), want: schedDecision{notBefore: at(500)}}, // in the past: no wait
			}),
		},
		{
			name: "an empty claim after a notification that named no key partitions looks again ClaimWindow later, once",
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: schedEvent{kind: schedWoke, at: at(9000), cause: causeNotify, untargeted: true}, any: true},
				{e: begin(9000, false), want: polled},
				{e: found(9100, 0), want: linger(25 * time.Millisecond)},
			}, claim(34100, causeWindow, false, 0, none)),
		},
		{
			name: "an empty claim after a notification that named this relay's key partitions waits",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(9000, causeNotify, false, 0, none)),
		},
		{
			name: "without a claim window, an untargeted notification schedules nothing either",
			cfg:  schedConfig{batchSize: 100, window: -1, windowPoll: 500 * time.Microsecond, busyGap: 20 * time.Millisecond},
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: schedEvent{kind: schedWoke, at: at(9000), cause: causeNotify, untargeted: true}, any: true},
				{e: begin(9000, false), want: polled},
				{e: found(9100, 0), want: none},
			}),
		},
		{
			name: "without a claim window, found rows schedule nothing",
			cfg:  schedConfig{batchSize: 100, window: -1, windowPoll: 500 * time.Microsecond, busyGap: 20 * time.Millisecond},
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, none)),
		},
		{
			name: "sparse: a notified hit lingers one ClaimWindow",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond))),
		},
		{
			name:  "sparse, notifications that name key partitions: a hit woken by one schedules no claim after it",
			cfg:   targeting,
			steps: cat(claim(0, causeBacklog, false, 0, none), claim(1000, causeNotify, false, 3, none)),
		},
		{
			name: "sparse, an untargeted notification in the last 10 s: a targeted hit lingers one ClaimWindow again",
			cfg:  targeting,
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: schedEvent{kind: schedWoke, at: at(1000), cause: causeNotify, untargeted: true}, any: true},
				{e: begin(1000, false), want: polled},
				{e: found(1100, 0), any: true},
			}, claim(40000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(int(unnotifiedFor/time.Microsecond)+2000, causeNotify, false, 2, none)),
		},
		{
			name: "sparse, an untargeted notification that arrives as the claim begins (drained then): the targeted hit still lingers one ClaimWindow",
			cfg:  targeting,
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: schedEvent{kind: schedWoke, at: at(1000), cause: causeNotify}, any: true},
				{e: schedEvent{kind: schedBegin, at: at(1000), drained: true, untargeted: true}, want: polled},
				{e: found(1100, 3), want: linger(25 * time.Millisecond)},
			}),
		},
		{
			name: "sparse: later hits do not push the window's claim back",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(5000, causeNotify, false, 1, none)),
		},
		{
			name: "sparse: an empty window claim lingers until ClaimWindow after the last hit",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(5000, causeNotify, false, 1, none),
				claim(26000, causeWindow, false, 0, linger(4*time.Millisecond))), // the last hit was at 5.1ms
		},
		{
			name: "a window claim that found events no notification announced turns the window dense",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(26000, causeWindow, false, 2, linger(25*time.Millisecond)),   // suspect: no notification pending
				claim(40000, causeNotify, false, 1, linger(500*time.Microsecond))), // 14ms later: a sign; dense
			dense: true,
		},
		{
			name: "a notification within notifyGrace announced them: still sparse",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(26000, causeWindow, false, 2, linger(25*time.Millisecond)),
				[]step{{e: woke(28000, causeNotify), want: schedDecision{notBefore: at(26500)}}},
				claim(40000, causeNotify, false, 1, none)), // sparse: inside the window opened at 26.1ms
		},
		{
			name: "a window claim that began with a notification pending is no sign",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causeNotify, false, 3, linger(25*time.Millisecond)),
				claim(26000, causeWindow, true, 2, linger(25*time.Millisecond)),
				claim(40000, causeNotify, false, 1, none)), // inside the window opened at 26.1ms
		},
		{
			name: "dense: empty claims double the gap up to 4×ClaimWindowPoll",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causePoll, false, 2, linger(25*time.Millisecond)),
				claim(12000, causeWindow, false, 1, linger(500*time.Microsecond)), // dense now
				claim(12600, causeWindow, false, 0, linger(1000*time.Microsecond)),
				claim(13700, causeWindow, false, 0, linger(2000*time.Microsecond)),
				claim(15800, causeWindow, false, 0, linger(2000*time.Microsecond)),
				claim(36900, causeWindow, false, 0, linger(100*time.Microsecond)), // what is left of the window (until 37.1ms)
				claim(37100, causeWindow, false, 0, none)),                        // the window is over
			dense: true,
		},
		{
			name: "dense, after the window: an empty claim after an untargeted notification still looks again ClaimWindow later",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causePoll, false, 2, linger(25*time.Millisecond)),
				claim(12000, causeWindow, false, 1, linger(500*time.Microsecond)), // dense now
				claim(37100, causeWindow, false, 0, none),                         // the window is over
				[]step{
					{e: schedEvent{kind: schedWoke, at: at(40000), cause: causeNotify, untargeted: true}, any: true},
					{e: begin(40000, false), want: polled},
					{e: found(40100, 0), want: linger(25 * time.Millisecond)},
				}),
			dense: true,
		},
		{
			name: "dense, a moment before the window ends: the claim after an untargeted notification is still ClaimWindow after it",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causePoll, false, 2, linger(25*time.Millisecond)),
				claim(12000, causeWindow, false, 1, linger(500*time.Microsecond)), // dense now, window until 37.1ms
				[]step{
					{e: schedEvent{kind: schedWoke, at: at(36900), cause: causeNotify, untargeted: true}, any: true},
					{e: begin(36900, false), want: polled},
					{e: found(37000, 0), want: linger(100 * time.Microsecond)}, // what is left of the window
				},
				claim(37100, causeWindow, false, 0, linger(24800*time.Microsecond))), // until 62ms: 25ms after the empty claim
			dense: true,
		},
		{
			name: "below busyRate the dense window claims every ClaimWindowPoll",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causePoll, false, 2, linger(25*time.Millisecond)),
				claim(12000, causeWindow, false, 1, linger(500*time.Microsecond)),
				claim(12600, causeWindow, false, 90, linger(500*time.Microsecond))), // about 1,850 events/s
			dense: true,
		},
		{
			name: "busy: above busyRate for the whole table (rate / share) it claims every BusyClaimInterval",
			steps: cat(claim(0, causeBacklog, false, 0, none),
				claim(1000, causePoll, false, 2, linger(25*time.Millisecond)),
				claim(12000, causeWindow, false, 1, linger(500*time.Microsecond)),
				claimShare(12600, causeWindow, false, 90, 0.5, linger(20*time.Millisecond))), // owning half: 3,700/s
			dense: true,
		},
		{
			name: "failures back off longer each time in a row, then claim at once",
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: woke(1000, causePoll), want: none}, {e: begin(1000, false), want: polled}, {e: failed(1100), want: schedDecision{retry: 1}},
				{e: woke(2000, causeBacklog), want: none}, {e: begin(2000, false), want: polled}, {e: failed(2100), want: schedDecision{retry: 2}},
			}),
			backlog: true,
		},
		{
			name: "a claim that succeeds ends the failures",
			steps: cat(claim(0, causeBacklog, false, 0, none), []step{
				{e: woke(1000, causePoll), want: none}, {e: begin(1000, false), want: polled}, {e: failed(1100), want: schedDecision{retry: 1}},
				{e: woke(2000, causeBacklog), want: none}, {e: begin(2000, false), want: polled}, {e: found(2100, 0), want: none},
				{e: woke(3000, causePoll), want: none}, {e: begin(3000, false), want: polled}, {e: failed(3100), want: schedDecision{retry: 1}},
			}),
			backlog: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cf := c.cfg
			if cf == (schedConfig{}) {
				cf = cfg
			}
			s := cf.start()
			if !s.backlog {
				t.Fatal("a new schedule does not claim at once")
			}
			var last time.Time
			for i, st := range c.steps {
				var d schedDecision
				s, d = cf.next(s, st.e)
				if !st.any && d != st.want {
					t.Errorf("step %d (event %d at %v): decision %+v, want %+v", i, st.e.kind, st.e.at.Sub(t0), d, st.want)
				}
				last = st.e.at
			}
			if s.backlog != c.backlog {
				t.Errorf("backlog = %v, want %v", s.backlog, c.backlog)
			}
			if got := s.mode.dense(last); got != c.dense {
				t.Errorf("dense = %v, want %v", got, c.dense)
			}
		})
	}
}

// TestScheduleIsPure: next returns its decision from its arguments alone;
// the state passed in is not changed.
func TestScheduleIsPure(t *testing.T) {
	cfg := schedConfig{batchSize: 10, window: 25 * time.Millisecond, windowPoll: 500 * time.Microsecond, busyGap: 20 * time.Millisecond}
	s := cfg.start()
	s, _ = cfg.next(s, schedEvent{kind: schedWoke, cause: causeBacklog, at: time.Unix(1, 0)})
	s, _ = cfg.next(s, schedEvent{kind: schedBegin, at: time.Unix(1, 0)})
	before := s
	e := schedEvent{kind: schedClaimed, at: time.Unix(1, 1000), rows: 3}
	s1, d1 := cfg.next(s, e)
	s2, d2 := cfg.next(s, e)
	if s != before || s1 != s2 || d1 != d2 {
		t.Fatalf("next is not a function of its arguments: %+v / %+v, %+v / %+v", s1, s2, d1, d2)
	}
}
