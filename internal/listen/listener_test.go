package listen

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/notify"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// waitTimeout bounds every wait for something the listener should do.
const waitTimeout = 15 * time.Second

// connConfig parses db's connection string for the listener's dedicated
// connections, tagged with an application_name that identifies them in
// pg_stat_activity.
func connConfig(t *testing.T, db *testenv.TestDB) (*pgx.ConnConfig, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	app := "notify-test-" + db.Schema
	cfg.RuntimeParams["application_name"] = app
	return cfg, app
}

// connectWith returns a connect function that opens a new connection with
// a copy of cfg on each call.
func connectWith(cfg *pgx.ConnConfig) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, cfg.Copy())
	}
}

// stateLog records OnStateChange calls.
type stateLog struct {
	mu     sync.Mutex
	states []State
}

func (s *stateLog) add(st State) {
	s.mu.Lock()
	s.states = append(s.states, st)
	s.mu.Unlock()
}

func (s *stateLog) get() []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]State(nil), s.states...)
}

// run starts l.Run and returns a function that cancels it and checks that
// it returns context.Canceled within 5 seconds (also called at cleanup).
func run(t *testing.T, l *Listener) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run returned %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of cancellation")
			}
			if s := l.State(); s != StateStopped {
				t.Errorf("State() after Run = %s, want stopped", s)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitWake(t *testing.T, l *Listener, what string) {
	t.Helper()
	select {
	case <-l.Wake():
	case <-time.After(waitTimeout):
		t.Fatalf("no wake-up %s within %s (state %s, reconnects %d)", what, waitTimeout, l.State(), l.Reconnects())
	}
}

func drainWake(l *Listener) {
	select {
	case <-l.Wake():
	default:
	}
}

func sendNotify(t *testing.T, db *testenv.TestDB, channel, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatalf("pg_notify: %v", err)
	}
}

// barrier sends a ping-lookalike notification and waits until the
// listener handled it. Notifications from one sender are delivered in
// commit order, so everything sent before has been handled too. Only for
// listeners without a watchdog (nothing else reads pingBack).
func barrier(t *testing.T, db *testenv.TestDB, l *Listener) {
	t.Helper()
	const seq = 1 << 40
	sendNotify(t, db, l.cfg.Channel, pingPrefix+strconv.FormatUint(seq, 10))
	deadline := time.After(waitTimeout)
	for {
		select {
		case got := <-l.pingBack:
			if got == seq {
				return
			}
		case <-deadline:
			t.Fatal("barrier notification not handled")
		}
	}
}

func TestWakeOnConnectThenOncePerBurst(t *testing.T) {
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1}, connectWith(cfg), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	var states stateLog
	l.OnStateChange = states.add
	if s := l.State(); s != StateConnecting {
		t.Fatalf("State() before Run = %s, want connecting", s)
	}
	stop := run(t, l)

	waitWake(t, l, "after connecting")
	if s := l.State(); s != StateListening {
		t.Fatalf("State() = %s after the first wake-up, want listening", s)
	}
	if n := l.Reconnects(); n != 1 {
		t.Errorf("Reconnects() = %d after connecting, want 1", n)
	}
	barrier(t, db, l)
	if n := len(l.Wake()); n != 0 {
		t.Fatalf("%d extra wake-ups after connecting, want exactly one", n)
	}

	if n := cap(l.Wake()); n != 1 {
		t.Fatalf("cap(Wake()) = %d, want 1", n)
	}
	for burst := 1; burst <= 2; burst++ {
		// Nobody reads Wake during the burst: the listener must still handle
		// every notification (a blocking send would stall at the second).
		for i := range 100 {
			sendNotify(t, db, db.Schema, "burst "+strconv.Itoa(burst)+" #"+strconv.Itoa(i))
		}
		want := int64(100 * burst)
		testenv.Eventually(t, waitTimeout, func() bool { return l.Notifications() >= want },
			"Notifications() = %d, want %d", l.Notifications(), want)
		barrier(t, db, l)
		if n := l.Notifications(); n != want {
			t.Fatalf("Notifications() = %d, want %d (pings must not count)", n, want)
		}
		if n := len(l.Wake()); n != 1 {
			t.Fatalf("burst %d: %d pending wake-ups, want 1", burst, n)
		}
		<-l.Wake()
	}

	stop()
	got := states.get()
	want := []State{StateListening, StateStopped}
	if !equalStates(got, want) {
		t.Errorf("state changes %v, want %v", got, want)
	}
}

func equalStates(a, b []State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUnexpectedPayloadsOnlyWake(t *testing.T) {
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1}, connectWith(cfg), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, l)
	waitWake(t, l, "after connecting")

	payloads := map[string]string{
		"empty":          "",
		"garbage":        "\x01\x02\x7f ~!@#$%^&*() ∂ƒ© 漢字 \t\r\n' OR 1=1; --",
		"huge":           strings.Repeat("x", 7000),
		"json":           `{"event_id":"0b7e8a8e-2c2f-4e5a-9a0b-8c1d2e3f4a5b","topic":"orders","n":[1,2,3],"nested":{"a":null}}`,
		"ping prefix":    pingPrefix,
		"ping not a seq": pingPrefix + "not-a-number",
		"ping negative":  pingPrefix + "-1",
	}
	for name, payload := range payloads {
		t.Run(name, func(t *testing.T) {
			drainWake(l)
			before := l.Notifications()
			sendNotify(t, db, db.Schema, payload)
			waitWake(t, l, "after a notification")
			testenv.Eventually(t, waitTimeout, func() bool { return l.Notifications() == before+1 },
				"Notifications() = %d, want %d", l.Notifications(), before+1)
			if s := l.State(); s != StateListening {
				t.Fatalf("State() = %s, want listening", s)
			}
		})
	}
	// The NOTIFY statement (not pg_notify) works the same.
	drainWake(l)
	if _, err := db.Pool.Exec(context.Background(), "NOTIFY "+pgx.Identifier{db.Schema}.Sanitize()+", 'via statement'"); err != nil {
		t.Fatal(err)
	}
	waitWake(t, l, "after NOTIFY")
	if n := l.Reconnects(); n != 1 {
		t.Errorf("Reconnects() = %d, want 1: no payload may break the connection", n)
	}
}

// A payload that names key partitions wakes the relay only if Wants is
// true for one of them, and counts as ignored otherwise; any payload that
// is not such a list wakes it, as before.
func TestKeyPartitionPayloadsWakeOnlyTheirOwner(t *testing.T) {
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1}, connectWith(cfg), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	owned := map[int]bool{3: true, 17: true}
	l.Wants = func(p int) bool { return owned[p] }
	run(t, l)
	waitWake(t, l, "after connecting")
	cases := []struct {
		payload string
		wakes   bool
		poll    bool // another relay's poll sent it (Wakeups)
	}{
		{payload: "kp:3", wakes: true},
		{payload: "kp:5", wakes: false},
		{payload: "kp:5,17", wakes: true},
		{payload: "kp:5,6,7", wakes: false},
		{payload: "kp:", wakes: true},      // names nothing: not a list
		{payload: "kp:5,x", wakes: true},   // malformed: wake
		{payload: "kp:-1", wakes: true},    // malformed: wake
		{payload: "kp:9999", wakes: false}, // out of range is the relay's to judge
		{payload: "", wakes: true},
		{payload: "order-42", wakes: true},
		{payload: "poll:kp:3,5", wakes: true, poll: true},
		{payload: "poll:kp:5", poll: true},
		{payload: "poll:", wakes: true, poll: true}, // a poll that found too many partitions to name
		{payload: "members", wakes: true},           // a change of members: not untargeted
	}
	for _, c := range cases {
		drainWake(l)
		notes, ignored := l.Notifications(), l.Ignored()
		all, poll := l.Wakeups()
		untargeted := l.Untargeted()
		sendNotify(t, db, db.Schema, c.payload)
		barrier(t, db, l) // the payload was handled
		woke := len(l.Wake()) == 1
		if woke != c.wakes {
			t.Errorf("payload %q woke the relay: %v, want %v", c.payload, woke, c.wakes)
		}
		wantIgnored := ignored
		if !c.wakes {
			wantIgnored++
		}
		if l.Notifications() != notes+1 || l.Ignored() != wantIgnored {
			t.Errorf("payload %q: Notifications %d -> %d, Ignored %d -> %d; want +1 and %d", c.payload, notes, l.Notifications(), ignored, l.Ignored(), wantIgnored)
		}
		wantAll, wantPoll := all, poll
		if c.wakes {
			wantAll++
			if c.poll {
				wantPoll++
			}
		}
		if a, p := l.Wakeups(); a != wantAll || p != wantPoll {
			t.Errorf("payload %q: Wakeups %d, %d; want %d, %d", c.payload, a, p, wantAll, wantPoll)
		}
		// Untargeted: a payload that stands for events it does not place.
		wantUntargeted := untargeted
		if slices.Contains([]string{"kp:", "kp:5,x", "kp:-1", "", "order-42"}, c.payload) {
			wantUntargeted++
		}
		if u := l.Untargeted(); u != wantUntargeted {
			t.Errorf("payload %q: Untargeted %d, want %d", c.payload, u, wantUntargeted)
		}
	}
}

// terminateListener terminates the listener's backend and fails unless
// exactly one backend was terminated.
func terminateListener(t *testing.T, db *testenv.TestDB, app string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	type term struct {
		Pid int32 `db:"pid"`
		OK  bool  `db:"ok"`
	}
	rows, err := db.Pool.Query(ctx, "SELECT pid, pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := pgx.CollectRows(rows, pgx.RowToStructByName[term])
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != 1 || !terms[0].OK {
		t.Fatalf("pg_terminate_backend on %q: %v, want exactly one backend terminated", app, terms)
	}
	// pg_terminate_backend only signals: the backend is gone once it has
	// left pg_stat_activity, and only then may a later call count the
	// listener's backends (under load a terminated one lingers, beside
	// the listener's new session).
	for {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", terms[0].Pid).Scan(&n); err != nil {
			t.Fatalf("backend %d of %q still there: %v", terms[0].Pid, app, err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReconnectAfterTerminateBackend(t *testing.T) {
	db := testenv.DB(t)
	cfg, app := connConfig(t, db)
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond},
		connectWith(cfg), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	var states stateLog
	l.OnStateChange = states.add
	stop := run(t, l)
	waitWake(t, l, "after connecting")

	const rounds = 5
	for i := 1; i <= rounds; i++ {
		drainWake(l)
		terminateListener(t, db, app)
		// The wake-up after the reconnect comes after Reconnects and State
		// were updated (HandleBacklog order).
		waitWake(t, l, "after reconnecting")
		if n := l.Reconnects(); n != int64(i+1) {
			t.Fatalf("round %d: Reconnects() = %d, want %d", i, n, i+1)
		}
		if s := l.State(); s != StateListening {
			t.Fatalf("round %d: State() = %s, want listening", i, s)
		}
		before := l.Notifications()
		sendNotify(t, db, db.Schema, "after reconnect "+strconv.Itoa(i))
		waitWake(t, l, "for a notification after reconnecting")
		if n := l.Notifications(); n != before+1 {
			t.Fatalf("round %d: Notifications() = %d, want %d", i, n, before+1)
		}
	}

	stop()
	want := []State{StateListening}
	for range rounds {
		want = append(want, StateConnecting, StateListening)
	}
	want = append(want, StateStopped)
	if got := states.get(); !equalStates(got, want) {
		t.Errorf("state changes %v, want %v", got, want)
	}
}

// proxied returns a copy of cfg that connects through a new tcpproxy in
// front of cfg's server.
func proxied(t *testing.T, cfg *pgx.ConnConfig) (*pgx.ConnConfig, *tcpproxy.Proxy) {
	t.Helper()
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("database on a unix socket (%s): no TCP to proxy", cfg.Host)
	}
	p, err := tcpproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	host, port, _ := net.SplitHostPort(p.Addr())
	portN, _ := strconv.Atoi(port)
	pc := cfg.Copy()
	pc.Host, pc.Port, pc.Fallbacks = host, uint16(portN), nil
	return pc, p
}

func TestWatchdogDetectsHalfOpenConnection(t *testing.T) {
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	pcfg, proxy := proxied(t, cfg)
	// The pinger (db.Pool) connects directly; only the listener goes
	// through the proxy. A ping (the pool's first connection included)
	// that a loaded machine keeps longer than PingTimeout would look like
	// a half-open connection: 2 s, and detection still takes seconds.
	l, err := New(notify.Config{
		Channel:      db.Schema,
		PingInterval: 200 * time.Millisecond,
		PingTimeout:  2 * time.Second,
		ReconnectMin: 20 * time.Millisecond,
		ReconnectMax: 200 * time.Millisecond,
	}, connectWith(pcfg), db.Pool, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	run(t, l)
	waitWake(t, l, "after connecting")

	// Healthy: pings come back and the watchdog leaves the connection be.
	pingsSent := func() uint64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.pingSeq
	}
	testenv.Eventually(t, waitTimeout, func() bool { return pingsSent() >= 4 }, "the watchdog sent %d pings, want 4", pingsSent())
	if n := l.Reconnects(); n != 1 {
		t.Fatalf("Reconnects() = %d with a healthy connection, want 1 (watchdog false positive)", n)
	}

	// Half-open: the listener's connection stays up but carries nothing.
	accepted := proxy.Accepted()
	proxy.Blackhole()
	start := time.Now()
	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateConnecting },
		"the watchdog did not drop the blackholed connection")
	t.Logf("watchdog dropped the half-open connection after %s", time.Since(start).Round(time.Millisecond))

	// The reconnect goes through the proxy while it is still blackholed:
	// the new connection's startup packets are lost too, so that attempt
	// hangs. Only restore the network once such an attempt is under way.
	testenv.Eventually(t, waitTimeout, func() bool { return proxy.Accepted() > accepted },
		"no reconnect attempt through the proxy")
	proxy.Restore()

	testenv.Eventually(t, waitTimeout, func() bool { return l.State() == StateListening && l.Reconnects() >= 2 },
		"not listening again after Restore (state %s, reconnects %d)", l.State(), l.Reconnects())
	waitWake(t, l, "after reconnecting")

	drainWake(l)
	before := l.Notifications()
	sendNotify(t, db, db.Schema, "after half-open")
	waitWake(t, l, "for a notification after reconnecting")
	testenv.Eventually(t, waitTimeout, func() bool { return l.Notifications() == before+1 },
		"Notifications() = %d, want %d", l.Notifications(), before+1)
}

// attempts records the times of connect calls.
type attempts struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *attempts) wrap(connect func(context.Context) (*pgx.Conn, error)) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		a.mu.Lock()
		a.times = append(a.times, time.Now())
		a.mu.Unlock()
		return connect(ctx)
	}
}

func (a *attempts) get() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.times...)
}

func TestDatabaseDownAtStart(t *testing.T) {
	// A port nothing listens on: every connect is refused at once.
	addr := testenv.RefusedAddr(t)
	cfg, err := pgx.ParseConfig("postgres://nobody@" + addr + "/nothing?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}

	const minDelay, maxDelay = 50 * time.Millisecond, 400 * time.Millisecond
	var at attempts
	l, err := New(notify.Config{ReconnectMin: minDelay, ReconnectMax: maxDelay, PingInterval: -1},
		at.wrap(connectWith(cfg)), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	var states stateLog
	l.OnStateChange = states.add
	stop := run(t, l)

	const want = 7 // delays 50, 100, 200, 400, 400, 400 ms (±20%)
	testenv.Eventually(t, waitTimeout, func() bool { return len(at.get()) >= want }, "only %d connect attempts", len(at.get()))
	if s := l.State(); s != StateConnecting {
		t.Errorf("State() = %s while the database is down, want connecting", s)
	}
	times := at.get()
	for i := 1; i < want; i++ {
		expect := minDelay << (i - 1)
		if expect > maxDelay {
			expect = maxDelay
		}
		gap := times[i].Sub(times[i-1])
		if lo := expect * 8 / 10; gap < lo {
			t.Errorf("attempt %d came %s after the previous one, want at least %s (backoff %s - 20%% jitter)", i+1, gap, lo, expect)
		}
	}

	cancelled := time.Now()
	stop()
	if d := time.Since(cancelled); d > time.Second {
		t.Errorf("Run took %s to return after cancellation", d)
	}
	if got := states.get(); !equalStates(got, []State{StateStopped}) {
		t.Errorf("state changes %v, want only [stopped]", got)
	}
	if n := l.Reconnects(); n != 0 {
		t.Errorf("Reconnects() = %d, want 0", n)
	}
}

func TestCancelWhileConnectHangs(t *testing.T) {
	db := testenv.DB(t)
	cfg, _ := connConfig(t, db)
	pcfg, proxy := proxied(t, cfg)
	proxy.Blackhole() // connects are accepted, then nothing answers
	var at attempts
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1}, at.wrap(connectWith(pcfg)), nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, l)
	testenv.Eventually(t, waitTimeout, func() bool { return proxy.Accepted() >= 1 }, "no connect attempt")
	cancelled := time.Now()
	stop()
	if d := time.Since(cancelled); d > time.Second {
		t.Errorf("Run took %s to return after cancellation", d)
	}
}

func TestConfigValidate(t *testing.T) {
	var zero notify.Config
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	if zero.Channel != "" {
		t.Fatalf("Validate changed the config: %+v", zero)
	}
	c := zero.WithDefaults()
	if c.Channel != outbox.DefaultChannel || c.ReconnectMin != 100*time.Millisecond || c.ReconnectMax != 5*time.Second ||
		c.PingInterval != 5*time.Second || c.PingTimeout != 5*time.Second {
		t.Errorf("defaults not applied: %+v", c)
	}
	ok := []notify.Config{
		{Channel: strings.Repeat("c", 63)},
		{PingInterval: -1},
		{ReconnectMin: time.Second, ReconnectMax: time.Second},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		field string
		cfg   notify.Config
	}{
		{"Config.Channel", notify.Config{Channel: strings.Repeat("c", 64)}},
		{"Config.ReconnectMin", notify.Config{ReconnectMin: -time.Second}},
		{"Config.ReconnectMax", notify.Config{ReconnectMin: 2 * time.Second, ReconnectMax: time.Second}},
		{"Config.ReconnectMax", notify.Config{ReconnectMax: -time.Second}},
		{"Config.PingTimeout", notify.Config{PingTimeout: -time.Second}},
	}
	for _, tc := range bad {
		c := tc.cfg
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.field)
		}
		if _, nerr := New(tc.cfg, connectWith(&pgx.ConnConfig{}), nil, nil); nerr == nil || nerr.Error() != err.Error() {
			t.Errorf("New(%+v) = %v, want the Validate error %v", tc.cfg, nerr, err)
		}
	}
	if _, err := New(notify.Config{}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Errorf("New with nil connect: %v", err)
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{StateConnecting: "connecting", StateListening: "listening", StateStopped: "stopped", 7: "State(7)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
}
