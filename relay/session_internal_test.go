package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// The settings a DBA sets on the database that would break or churn the
// relay's sessions are overridden for them, and only those: pooled
// sessions turn idle_session_timeout off and raise a statement_timeout
// shorter than Config.DBTimeout to it (a longer one is kept); the LISTEN
// session turns idle_session_timeout and
// idle_in_transaction_session_timeout off.
func TestSessionSettingsOverrideWhatChurnsTheRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Database(t)
	var version int
	if err := db.Pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skipf("PostgreSQL %d has no idle_session_timeout", version)
	}
	var name string
	if err := db.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	alter := func(setting, value string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET "+setting+" = '"+value+"'"); err != nil {
			t.Fatal(err)
		}
	}
	// Values no statement or pause of this test can reach on a loaded
	// machine: they apply to every new session, the settings statements
	// and the checks included.
	alter("idle_session_timeout", "5min")
	alter("idle_in_transaction_session_timeout", "5min")
	alter("statement_timeout", "5s")
	show := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (idle, idleTx, stmt string) {
		t.Helper()
		if err := q.QueryRow(ctx, "SELECT current_setting('idle_session_timeout'), current_setting('idle_in_transaction_session_timeout'), current_setting('statement_timeout')").Scan(&idle, &idleTx, &stmt); err != nil {
			t.Fatal(err)
		}
		return idle, idleTx, stmt
	}
	pooled := func() (string, string, string) {
		cfg, err := pgxpool.ParseConfig(db.ConnString)
		if err != nil {
			t.Fatal(err)
		}
		ConfigurePool(cfg, Config{DBTimeout: 7 * time.Second})
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		return show(pool)
	}
	if idle, idleTx, stmt := pooled(); idle != "0" || idleTx != "5min" || stmt != "7s" {
		t.Errorf("pooled session: idle_session_timeout %s, idle_in_transaction_session_timeout %s, statement_timeout %s; want 0, 5min (kept), 7s", idle, idleTx, stmt)
	}
	cc, err := pgx.ParseConfig(db.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	configureListener(cc)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	idle, idleTx, stmt := show(conn)
	conn.Close(ctx)
	if idle != "0" || idleTx != "0" || stmt != "5s" {
		t.Errorf("LISTEN session: idle_session_timeout %s, idle_in_transaction_session_timeout %s, statement_timeout %s; want 0, 0, 5s (kept)", idle, idleTx, stmt)
	}
	alter("statement_timeout", "1min")
	if _, _, stmt := pooled(); stmt != "1min" {
		t.Errorf("pooled session with a longer statement_timeout: %s, want 1min (kept)", stmt)
	}
}
