package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/relay"
)

// Writers that notify another channel than the relay's (or none) leave
// every event to the fallback poll, with readiness true: a new user ran
// --channel payments_outbox against writers on the default channel and
// saw 221 ms mean latency and no word. The relay warns once, naming the
// flag, when claims the poll woke found events three times in a row; a
// relay whose writers notify its channel does not, in 30 events.
func TestEventsFoundOnlyByThePollAreWarnedOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Where the writer notifies the relay's channel, a poll interval of
	// 1 s keeps the poll from finding an event before its notification
	// wakes the relay, even on a loaded machine.
	for _, tc := range []struct {
		name   string
		notify string // the channel the writer notifies
		poll   time.Duration
		warn   bool
	}{{"another channel", "not_the_relays", 100 * time.Millisecond, true}, {"the relay's channel", "", time.Second, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, k := testenv.MigratedDB(t), testenv.Kafka(t)
			topic := k.Topic(t, 1)
			core, logs := observer.New(zap.WarnLevel)
			h := startRelay(t, db, k, topic, opts{relay: relay.Config{PollInterval: tc.poll}, log: zap.New(core)})
			channel := tc.notify
			if channel == "" {
				channel = db.Schema // the harness's LISTEN channel
			}
			// The writer commits an event every 150 ms, longer than the
			// claim window (25 ms) in which the relay keeps claiming after
			// a find: an event written inside it would be found by the
			// window's claims, not the poll.
			warned := logs.FilterMessageSnippet("found only by the fallback poll")
			tick := time.NewTicker(150 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < 30 && warned.Len() == 0; i++ {
				<-tick.C
				if _, err := db.Pool.Exec(ctx, `WITH e AS (INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'a', 't', '{}') RETURNING 1)
SELECT pg_notify($1, '') FROM e`, channel); err != nil {
					t.Fatal(err)
				}
				warned = logs.FilterMessageSnippet("found only by the fallback poll")
			}
			testenv.Eventually(t, 10*time.Second, func() bool { return unpublished(t, db) == 0 }, "events unpublished")
			warned = logs.FilterMessageSnippet("found only by the fallback poll")
			_ = h
			if got := warned.Len(); (got == 1) != tc.warn || got > 1 {
				t.Fatalf("%d warnings about events found only by the poll, want warned=%v; all warnings: %v", got, tc.warn, logs.All())
			}
			if tc.warn && !strings.Contains(warned.All()[0].Message, "--channel") {
				t.Fatalf("the warning does not name --channel: %s", warned.All()[0].Message)
			}
		})
	}
}
