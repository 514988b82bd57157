package relay

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Settings a DBA may give the relay's database or role (ALTER DATABASE
// ... SET, ALTER ROLE ... SET) that break or churn the relay's own
// sessions, which it overrides for them when they connect:
//
//   - idle_session_timeout (PostgreSQL 14+) closes a session idle for that
//     long: the LISTEN connection between notifications (issue 20: with 2s,
//     25 s of idling logged 13 reconnects and 26 warnings, and every
//     reconnect loses the notifications sent meanwhile), and pooled
//     connections between claims, which the pool then replaces. The relay
//     sets it to 0 for its sessions.
//   - idle_in_transaction_session_timeout: the listener's session is set
//     to 0 too (it never opens a transaction; a timeout there could only
//     end the LISTEN).
//   - statement_timeout shorter than the relay's own bound on a statement
//     (Config.DBTimeout, 10s): a claim or mark that takes longer than the
//     database's timeout (a rescan from seq 0 while a snapshot is held, a
//     large backlog's count) would fail at every attempt. The relay raises
//     it to Config.DBTimeout for its pooled sessions; a longer one, or none
//     (0), is kept. Every statement of the relay is bounded by its own
//     deadline anyway.
//
// Each is set only where it is set (pg_settings), in one statement when a
// connection is made, so nothing changes on a database without them and
// on PostgreSQL 13 (which has no idle_session_timeout). Through a
// transaction pooler (PgBouncer) the statement reaches one server
// connection of the pooler's, not every one: set the role's settings
// there instead (docs/database.md).

// ConfigurePool makes every session of a pool built from cfg override the
// database settings that would break or churn the relay's sessions (see
// above: idle_session_timeout off, statement_timeout at least
// relayCfg.DBTimeout), after cfg's own AfterConnect, if any. Call it on
// the pool's configuration before pgxpool.NewWithConfig; outbox-relay run
// does. relay.NewService sets the LISTEN session's settings itself. A
// connection on which the statement fails is kept as it is.
func ConfigurePool(cfg *pgxpool.Config, relayCfg Config) {
	ms := strconv.FormatInt(relayCfg.WithDefaults().DBTimeout.Milliseconds(), 10)
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		// The simple protocol: no prepared statement, whatever the exec
		// mode and whatever pooler is in between.
		_, _ = conn.Exec(ctx, poolSettings.SQL, append([]any{pgx.QueryExecModeSimpleProtocol}, poolSettings.Args(poolSettingsArgs{DBTimeoutMS: ms})...)...)
		return nil
	}
}

// configureListener makes the LISTEN sessions of cc reset
// idle_session_timeout and idle_in_transaction_session_timeout, after cc's
// own AfterConnect, if any.
func configureListener(cc *pgx.ConnConfig) {
	prev := cc.AfterConnect
	cc.AfterConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		_, _ = conn.Exec(ctx, listenerSettings.SQL).ReadAll()
		return nil
	}
}
