package listen

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/notify"
)

// A listener whose connection keeps being closed (issue 20: with
// idle_session_timeout = 2s set by the DBA, 25 s of idling logged 26
// warnings, 13 of them "listener disconnected; reconnecting") logs the
// storm once: the first disconnect, then one line saying it keeps
// disconnecting, and the rest at debug level until it stays connected.
func TestReconnectStormIsLoggedOnce(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	cfg, app := connConfig(t, db)
	core, logs := observer.New(zapcore.InfoLevel)
	l, err := New(notify.Config{Channel: db.Schema, PingInterval: -1, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond},
		connectWith(cfg), nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	run(t, l)
	waitWake(t, l, "after connecting")
	const rounds = 8
	for i := 1; i <= rounds; i++ {
		drainWake(l)
		terminateListener(t, db, app)
		waitWake(t, l, "after reconnecting")
	}
	if n := l.Reconnects(); n != rounds+1 {
		t.Fatalf("Reconnects() = %d, want %d", n, rounds+1)
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 2 || warns[0].Message != "listener disconnected; reconnecting" || warns[1].ContextMap()["disconnects"] != int64(2) {
		var msgs []string
		for _, w := range warns {
			msgs = append(msgs, w.Message)
		}
		t.Fatalf("%d warnings for %d disconnects: %q; want the first disconnect and one line about the storm", len(warns), rounds, msgs)
	}
	t.Logf("%s %v", warns[1].Message, warns[1].ContextMap())
	if n := logs.FilterMessage("listening").Len(); n != 2 {
		t.Errorf("%d info lines \"listening\", want 2 (the first connection and the reconnect after the first disconnect; the storm's are at debug level)", n)
	}
}

// One restart of the database is one disconnect, then connection attempts
// that fail until it is back: no storm, so no word of something closing
// idle connections (a tester's pg_ctl restart logged "listener keeps
// disconnecting ... idle_session_timeout?"). The first failed attempt in
// a row is a warning, the rest debug; a storm still needs sessions that
// were up.
func TestFailedReconnectsAreNoStorm(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := &Listener{log: zap.New(core)}
	boom := errorString("connection refused")
	l.logDisconnect(boom, time.Millisecond, 0) // the session ends
	for f := 1; f <= 5; f++ {
		l.logDisconnect(boom, time.Millisecond, f) // the restart
	}
	l.logDisconnect(boom, time.Millisecond, 0) // up again, then closed
	var warns []string
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		warns = append(warns, e.Message)
	}
	want := []string{"listener disconnected; reconnecting", "listener could not connect; retrying",
		"listener keeps disconnecting; later disconnects are logged at debug level until it stays connected for 1m: does something close idle connections (idle_session_timeout, a proxy, a pooler)?"}
	if len(warns) != len(want) {
		t.Fatalf("warnings %q, want %q", warns, want)
	}
	for i := range want {
		if warns[i] != want[i] {
			t.Fatalf("warnings %q, want %q", warns, want)
		}
	}
	if n := logs.FilterMessage("listener could not connect again; retrying").Len(); n != 4 {
		t.Fatalf("%d debug lines for the later failed attempts, want 4", n)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
