package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// The library's relay refuses an UNLOGGED outbox table at start: Run
// returns the *outboxsql.UnloggedError, naming the fix, and relays nothing.
func TestServiceRefusesAnUnloggedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	if _, err := db.Pool.Exec(ctx, "ALTER TABLE outbox SET UNLOGGED"); err != nil {
		t.Fatal(err)
	}
	svc, err := relay.NewService(db.Pool, relay.ServiceConfig{Relay: relay.Config{Topic: k.Topic(t, 1)}, Kafka: kafka.Config{Brokers: k.Brokers}, NoNotify: true}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = svc.Run(rctx)
	var ue *outboxsql.UnloggedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "ALTER TABLE outbox SET LOGGED") || rctx.Err() != nil {
		t.Fatalf("Run on an unlogged table: %v; want the *UnloggedError at once", err)
	}
}

// A role with only SELECT and UPDATE on the outbox table (issue 20: claims
// failed on the order guard, then on its sweep, then on the sequence, one
// at a time, the log naming only the first): at start the relay names
// every missing privilege in one line.
func TestServiceNamesEveryMissingPrivilegeInOneLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	role, connString := db.Role(t)
	if _, err := db.Pool.Exec(ctx, "GRANT SELECT, UPDATE ON outbox TO "+role); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	svc, err := relay.NewService(pool, relay.ServiceConfig{
		Relay: relay.Config{Topic: k.Topic(t, 1)}, Kafka: kafka.Config{Brokers: k.Brokers}, NoNotify: true,
		Privileges: outboxsql.Needs{Retention: true, SnapshotWatch: true},
	}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	testenv.Eventually(t, 15*time.Second, func() bool { return logs.FilterMessageSnippet("lacks privileges").Len() > 0 }, "no line about the missing privileges")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := logs.FilterMessageSnippet("lacks privileges").All()
	if len(lines) != 1 {
		t.Fatalf("%d lines about privileges, want 1", len(lines))
	}
	missing := fmt.Sprint(lines[0].ContextMap()["missing"])
	for _, want := range []string{
		"DELETE on TABLE outbox (retention",
		"SELECT on TABLE outbox_order_guard", "INSERT on TABLE outbox_order_guard", "UPDATE on TABLE outbox_order_guard", "DELETE on TABLE outbox_order_guard",
		"SELECT on SEQUENCE outbox_seq_seq",
		"membership in ROLE pg_read_all_stats",
	} {
		if !strings.Contains(missing, want) {
			t.Errorf("the line does not name %q: %s", want, missing)
		}
	}
	for _, held := range []string{"SELECT on TABLE outbox ", "UPDATE on TABLE outbox "} {
		if strings.Contains(missing, held) {
			t.Errorf("the line names %q, which the role holds: %s", held, missing)
		}
	}
	t.Logf("%s role=%v missing=%s", lines[0].Message, lines[0].ContextMap()["role"], missing)
}
