// Package sql holds the outbox schema as versioned migrations embedded in the
// binary, and applies them with pressly/goose v3.
//
// Migrations run under a Postgres session advisory lock (goose's
// lock.NewPostgresSessionLocker), so two processes running `outbox-relay
// migrate` at once apply each migration exactly once; running it twice is a
// no-op. Objects are created unqualified, in the first schema of the
// connection's search_path, and goose's version table lives beside them.
package sql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// VersionTable is the name of goose's bookkeeping table, created beside the
// outbox table in the first schema of the search_path.
const VersionTable = "outbox_schema_migrations"

// Migrations returns the embedded migration files (migrations/NNNNN_name.sql),
// for tools that want to apply them with their own runner.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Result describes one applied migration.
type Result struct {
	// Version is the migration's number, e.g. 1 for 00001_outbox.sql.
	Version int64
	// Name is the migration's file name.
	Name string
}

// Migrate applies every pending migration through pool and returns those it
// applied (none when the schema is current). It holds a Postgres advisory
// lock for the duration so concurrent callers serialize. Errors are wrapped
// as "migrate: ...".
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrateDB(ctx, db)
}

func migrateDB(ctx context.Context, db *sql.DB) ([]Result, error) {
	// goose polls the advisory lock (pg_try_advisory_lock) every 5 s by
	// default, so a concurrent migrate would wait up to 5 s after the lock
	// is free. Poll every second instead, still for up to 5 minutes in all
	// (period 1 s × failure threshold 300 = goose's default 300 s).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider("", db, Migrations(),
		goose.WithStore(store),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		var perr *goose.PartialError
		if errors.As(err, &perr) && perr.Failed != nil && perr.Failed.Error != nil {
			return nil, fmt.Errorf("migrate %s: %w", perr.Failed.Source.Path, perr.Failed.Error)
		}
		return nil, fmt.Errorf("migrate: %w", err)
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		out = append(out, Result{Version: r.Source.Version, Name: r.Source.Path})
	}
	return out, nil
}
