package main

// The LISTEN connection (--listen-database-url) and the start-up check
// that the database is a primary.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/listen"
)

// validateListen checks --listen-database-url (never repeating it: it may
// hold a password) and sets the advice of the listener's deaf report to
// name the flag to change.
func (f *runFlags) validateListen() error {
	if f.listenURL == "" {
		f.notify.DeafHint = "--database-url goes through a transaction pooler? connect the listener directly to PostgreSQL with --listen-database-url"
		return nil
	}
	if f.noNotify {
		return usagef("--listen-database-url: has no use with --no-notify (nothing LISTENs); give one or the other")
	}
	if _, err := pgx.ParseConfig(f.listenURL); err != nil {
		return usagef("--listen-database-url: not a valid PostgreSQL URL or DSN: %s", redact(err, f.listenURL))
	}
	f.notify.DeafHint = "--listen-database-url goes through a transaction pooler, or to another database than --database-url? connect it directly to the database of --database-url"
	return nil
}

// checkPrimaries checks, once the database answers, that --database-url
// and, when given, --listen-database-url reach a primary (waitPrimary). A
// --listen-database-url that does not answer yet is waited for like the
// database; one that refuses the credentials or names no database fails.
func (f *runFlags) checkPrimaries(ctx context.Context, log *zap.Logger, pool *pgxpool.Pool, wait bool) error {
	if err := waitPrimary(ctx, log, f.startupWait, wait, "--database-url", poolStandby(pool)); err != nil {
		return err
	}
	if f.listenURL == "" || f.noNotify {
		return nil
	}
	lcfg, err := pgx.ParseConfig(f.listenURL)
	if err != nil {
		return usagef("--listen-database-url: not a valid PostgreSQL URL or DSN: %s", redact(err, f.listenURL))
	}
	connect := connectFunc(lcfg)
	if err := waitFor(ctx, log, "listener database (--listen-database-url)", func(ctx context.Context) error {
		conn, err := connect(ctx)
		if err == nil {
			_ = conn.Close(ctx)
		}
		return err
	}); err != nil {
		return err
	}
	return waitPrimary(ctx, log, f.startupWait, wait, "--listen-database-url", connStandby(connect))
}

// standbyCheck returns a *listen.StandbyError when the server is a hot
// standby, nil when it is a primary, or the error of reaching it.
type standbyCheck func(ctx context.Context) error

// poolStandby checks the server of one of pool's connections.
func poolStandby(pool *pgxpool.Pool) standbyCheck {
	return func(ctx context.Context) error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return inRecovery(ctx, c.Conn())
	}
}

// connStandby checks the server of a new connection.
func connStandby(connect func(context.Context) (*pgx.Conn, error)) standbyCheck {
	return func(ctx context.Context) error {
		conn, err := connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return inRecovery(ctx, conn)
	}
}

// inRecovery asks conn's server whether it is a hot standby. The probe
// stays inline rather than in sql/ (statements.go): a session probe run
// with the simple protocol on any connection (the pool's or the
// listener's), it names no table or column and takes no argument, so a
// file would hold the same one line and nothing to render.
func inRecovery(ctx context.Context, conn *pgx.Conn) error {
	var rec bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()", pgx.QueryExecModeSimpleProtocol).Scan(&rec); err != nil {
		return fmt.Errorf("check recovery: %w", err)
	}
	if rec {
		return &listen.StandbyError{Addr: listen.ServerAddr(conn.PgConn())}
	}
	return nil
}

// promotionPoll is how often the relay checks whether the standby it waits
// on was promoted.
const promotionPoll = 500 * time.Millisecond

// waitPrimary makes sure the server behind flag is a primary: a hot
// standby cannot take the claims' writes (SQLSTATE 25006) nor LISTEN. On
// a standby it returns an error at once (exit 1), unless --startup-wait
// was given (wait): then it logs one line and polls until the standby is
// promoted or ctx (bounded by --startup-wait) is done.
func waitPrimary(ctx context.Context, log *zap.Logger, startupWait time.Duration, wait bool, flag string, check standbyCheck) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := check(cctx)
	cancel()
	var se *listen.StandbyError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &se):
		return fmt.Errorf("%s: %w", flag, err)
	case !wait:
		return fmt.Errorf("%s: %s is a standby (in recovery): the relay needs the primary (claims write, LISTEN cannot run during recovery); point %s at the primary, or give --startup-wait to wait for a promotion", flag, se.Addr, flag)
	}
	log.Warn("database is a standby (in recovery): waiting for its promotion", zap.String("flag", flag), zap.String("server", se.Addr), zap.Duration("startup_wait", startupWait))
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s is still a standby (in recovery) after --startup-wait %s: the relay needs the primary; point %s at the primary", flag, se.Addr, startupWait, flag)
		case <-time.After(promotionPoll):
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		cancel()
		switch {
		case err == nil:
			log.Info("database promoted: no longer in recovery", zap.String("flag", flag), zap.String("server", se.Addr))
			return nil
		case permanent(err):
			return fmt.Errorf("%s refused the connection: %w", flag, err)
		case !errors.As(err, new(*listen.StandbyError)):
			log.Debug("standby check failed; retrying", zap.Error(err))
		}
	}
}
