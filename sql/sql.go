// Package sql holds the outbox schema as versioned migrations embedded in the
// binary, and applies them with pressly/goose v3.
//
// Migrations run under a Postgres session advisory lock (goose's
// lock.NewPostgresSessionLocker), so two processes running `outbox-relay
// migrate` at once apply each migration exactly once; running it twice is a
// no-op. Objects are created unqualified, in the first schema of the
// connection's search_path, and goose's version table lives beside them.
//
// The package is public so that applications can migrate or adopt their
// outbox table from their own start-up code or tests (Migrate, Adopt,
// MigrateOptions, AdoptTable), as `outbox-relay migrate` and `adopt` do,
// print its grants (GrantScript), and name the errors Migrate, Adopt and
// relay.Service.Run refuse a table with (UnloggedError,
// ReplicaIdentityError). The checks behind those errors, the table's
// report and its time partitions are the module's own, in
// internal/sqladmin.
package sql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing/fstest"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"

	"github.com/jackc/pgx/v5"
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

// Migrate applies every pending migration to the table "outbox" through
// pool and returns those it applied (none when the schema is current). It
// holds a Postgres advisory lock for the duration so concurrent callers
// serialize. An UNLOGGED table is refused (see MigrateTable). Errors are
// wrapped as "migrate: ...".
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	return MigrateTable(ctx, pool, config.DefaultTable)
}

// MigrateTable is Migrate for an outbox table of another name, optionally
// schema-qualified ("events", "billing.outbox"): the migrations are applied
// with that table's name, its indexes, constraints and order-guard table
// named after it (<name>_unpublished_seq_idx, <name>_order_guard, ...), in
// its schema, and its own migration history table,
// <schema>.<name>_schema_migrations ("outbox" keeps outbox_schema_migrations
// in the search_path's first schema). A schema that does not exist is an
// error saying so (*MissingSchemaError). An existing table that is
// UNLOGGED, or whose seq sequence is, is refused before anything is
// applied (*UnloggedError: a crash would empty it). Errors are wrapped as
// "migrate: ...".
func MigrateTable(ctx context.Context, pool *pgxpool.Pool, table string) ([]Result, error) {
	return MigrateWith(ctx, pool, MigrateOptions{Table: table})
}

// DefaultPartitions is the number of key partitions of a table that
// MigrateOptions.Partitions does not set.
const DefaultPartitions = 256

// MaxPartitions bounds MigrateOptions.Partitions.
const MaxPartitions = 4096

// MigrateOptions configures MigrateWith.
type MigrateOptions struct {
	// Table is the outbox table, optionally schema-qualified. Defaults to
	// "outbox".
	Table string
	// Partitions is the number of partitions of the aggregate key space
	// (1..MaxPartitions), which relays on the table own and claim from
	// (migration 00009). It is fixed when that migration runs: on a table
	// that has it, a different number is an error. Defaults to
	// DefaultPartitions, far above any number of relays.
	Partitions int
	// TimePartitioned creates the table partitioned by RANGE (created_at)
	// (see migration 00011): primary key (id, created_at), since a
	// partitioned table's unique keys must hold its partition key; a
	// DEFAULT partition <table>_default for rows no other partition covers;
	// and the partitions of the current interval and the
	// TimePartitionsAhead after it, which relays
	// keep creating. Its old partitions can then be dropped whole once
	// every row in them is published (outbox-relay --retention-drop-partitions). An
	// existing plain table is an error (it is not converted); on a table
	// created so, it may be given again or left out.
	TimePartitioned bool
	// TimePartitionInterval is each time partition's span, at least
	// MinTimePartitionInterval, a whole number of minutes. It is fixed
	// when the table is created: a different value later is an error.
	// Defaults to DefaultTimePartitionInterval (24h). Only with
	// TimePartitioned.
	TimePartitionInterval time.Duration
	// TimePartitionsAhead is how many intervals after the current one
	// have their partition created in advance, 1..MaxTimePartitionsAhead;
	// giving it again changes it. Defaults to DefaultTimePartitionsAhead
	// (7). Only with TimePartitioned.
	TimePartitionsAhead int
}

// validate checks opts, naming the field at fault.
func (opts MigrateOptions) validate() error {
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return fmt.Errorf("migrate: MigrateOptions.Partitions: must be 1..%d, got %d", MaxPartitions, opts.Partitions)
	}
	if !opts.TimePartitioned {
		if opts.TimePartitionInterval != 0 || opts.TimePartitionsAhead != 0 {
			return fmt.Errorf("migrate: MigrateOptions.TimePartitionInterval and TimePartitionsAhead need TimePartitioned")
		}
		return nil
	}
	if iv := opts.TimePartitionInterval; iv != 0 && (iv < MinTimePartitionInterval || iv%time.Minute != 0) {
		return fmt.Errorf("migrate: MigrateOptions.TimePartitionInterval: must be a whole number of minutes, at least %s, got %s", MinTimePartitionInterval, iv)
	}
	if n := opts.TimePartitionsAhead; n < 0 || n > MaxTimePartitionsAhead {
		return fmt.Errorf("migrate: MigrateOptions.TimePartitionsAhead: must be 1..%d, got %d", MaxTimePartitionsAhead, n)
	}
	return nil
}

// MigrateWith applies every pending migration to opts.Table (see
// MigrateTable), then fills in, in batches of 1,000 rows each its own
// short transaction, the key partition of unpublished rows written before
// migration 00009, and records that it did (the relay refuses a table
// without that record). Errors are wrapped as "migrate: ...".
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) ([]Result, error) {
	if opts.Table == "" {
		opts.Table = config.DefaultTable
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Table != config.DefaultTable {
		if err := sqladmin.CheckTableName(opts.Table); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	if opts.TimePartitioned {
		if opts.TimePartitionInterval == 0 {
			opts.TimePartitionInterval = DefaultTimePartitionInterval
		}
		if opts.TimePartitionsAhead == 0 {
			opts.TimePartitionsAhead = DefaultTimePartitionsAhead
		}
	}
	if err := checkSchema(ctx, pool, opts.Table); err != nil {
		return nil, err
	}
	if err := sqladmin.CheckDurability(ctx, pool, opts.Table); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var foreign bool
	if err := pool.QueryRow(ctx, foreignTableStmt.SQL, foreignTableStmt.Args(tableArgs{sqlname.Quote(opts.Table)})...).Scan(&foreign); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if foreign {
		return nil, fmt.Errorf("migrate: table %s exists without an aggregate_id column, so the migrations did not create it (e.g. a Debezium outbox table): migrate leaves it as it is; `outbox-relay adopt --table %s` prepares it, and the relay's commands then take --debezium or the --column-* flags that name its columns", opts.Table, opts.Table)
	}
	if opts.TimePartitioned {
		var kind *string
		if err := pool.QueryRow(ctx, relkindStmt.SQL, relkindStmt.Args(tableArgs{sqlname.Quote(opts.Table)})...).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		if kind != nil && *kind != "p" {
			return nil, fmt.Errorf("migrate: --time-partitioned: table %s exists and is not partitioned; migrate does not convert a table (create a new one, or leave out --time-partitioned)", opts.Table)
		}
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	res, err := migrateDB(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	if err := checkPartitions(ctx, pool, opts); err != nil {
		return res, err
	}
	if err := backfillKeyPartitions(ctx, pool, opts.Table, "aggregate_id"); err != nil {
		return res, err
	}
	// The time partitioning given and the partitions it asks for, in one
	// transaction: a partition that cannot be created leaves the table's
	// time partitioning as it was, not asking for partitions that do not
	// exist.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if opts.TimePartitioned {
			if err := setTimePartitioning(ctx, tx, opts); err != nil {
				return err
			}
		}
		if _, err := sqladmin.EnsureTimePartitionsTx(ctx, tx, opts.Table); err != nil {
			if opts.TimePartitioned {
				return fmt.Errorf("migrate: %w; the table's time partitioning is left as it was (--time-partitions-ahead not changed, no partition created)", err)
			}
			return fmt.Errorf("migrate: %w; no partition was created", err)
		}
		return nil
	})
	return res, err
}

// setTimePartitioning records opts' time partitioning in the table's
// <table>_partitioning (the interval only if none is recorded; a
// different one is an error) and creates its DEFAULT partition, in tx
// (pool). The table
// must be partitioned by range of created_at.
func setTimePartitioning(ctx context.Context, pool pgx.Tx, opts MigrateOptions) error {
	t := sqlname.Quote(opts.Table)
	var byCreatedAt bool
	if err := pool.QueryRow(ctx, byCreatedAtStmt.SQL, byCreatedAtStmt.Args(tableArgs{t})...).Scan(&byCreatedAt); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !byCreatedAt {
		return fmt.Errorf("migrate: --time-partitioned: table %s is partitioned, but not by RANGE (created_at) alone", opts.Table)
	}
	set, err := renderTable[timePartitioningArgs]("SetTimePartitioning", opts.Table)
	if err != nil {
		return fmt.Errorf("migrate: time partitions: %w", err)
	}
	var secs int64
	err = pool.QueryRow(ctx, set.SQL, set.Args(timePartitioningArgs{int64(opts.TimePartitionInterval / time.Second), opts.TimePartitionsAhead})...).Scan(&secs)
	if err != nil {
		return fmt.Errorf("migrate: time partitions: %w", err)
	}
	if got := time.Duration(secs) * time.Second; got != opts.TimePartitionInterval {
		return fmt.Errorf("migrate: table %s has time partitions of %s, fixed when it was created; it cannot change to %s", opts.Table, got, opts.TimePartitionInterval)
	}
	var hasDefault bool
	if err := pool.QueryRow(ctx, hasDefaultPartitionStmt.SQL, hasDefaultPartitionStmt.Args(tableArgs{t})...).Scan(&hasDefault); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !hasDefault {
		parts := strings.Split(opts.Table, ".")
		parts[len(parts)-1] = sqladmin.DefaultPartitionName(opts.Table)
		create, err := renderTable[sqlfile.NoArgs]("CreateDefaultPartition", opts.Table,
			"partition", sqlname.Quote(strings.Join(parts, ".")), "storage", sqladmin.PartitionStorage)
		if err == nil {
			_, err = pool.Exec(ctx, create.SQL)
		}
		if err != nil {
			return fmt.Errorf("migrate: default partition: %w", err)
		}
	}
	return nil
}

// timePartitioningArgs are the arguments of SetTimePartitioning:
// the interval in seconds and the partitions ahead.
type timePartitioningArgs struct {
	IntervalSeconds int64 `arg:"interval_seconds"`
	Ahead           int   `arg:"ahead"`
}

// MissingSchemaError is MigrateTable's error when the table's schema (or,
// for an unqualified name, the search_path's first schema) does not exist.
type MissingSchemaError struct {
	// Schema is the missing schema (for an unqualified name, the first
	// the search_path names, if any); SearchPath the connection's
	// search_path when the name was unqualified.
	Schema, SearchPath string
}

// Error names the missing schema and how to create it or name another.
func (e *MissingSchemaError) Error() string {
	switch {
	case e.SearchPath == "":
		return fmt.Sprintf("migrate: schema %s does not exist: create it (CREATE SCHEMA %s) or name another in --table", e.Schema, e.Schema)
	case e.Schema != "":
		return fmt.Sprintf("migrate: schema %s does not exist (the search_path is %s): create it (CREATE SCHEMA %s), or name an existing schema in --table (schema.outbox)", e.Schema, e.SearchPath, e.Schema)
	}
	return fmt.Sprintf("migrate: no schema of the search_path (%s) exists: create one (CREATE SCHEMA ...) or name an existing schema in --table (schema.outbox)", e.SearchPath)
}

// checkSchema returns a *MissingSchemaError when table's schema is missing.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if schema, _, ok := strings.Cut(table, "."); ok {
		var exists bool
		if err := pool.QueryRow(ctx, schemaExistsStmt.SQL, schemaExistsStmt.Args(schemaArgs{schema})...).Scan(&exists); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if !exists {
			return &MissingSchemaError{Schema: schema}
		}
		return nil
	}
	var current *string
	var path string
	if err := pool.QueryRow(ctx, currentSchemaStmt.SQL).Scan(&current, &path); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if current == nil {
		return &MissingSchemaError{Schema: firstSchema(path), SearchPath: path}
	}
	return nil
}

// firstSchema returns the first schema a search_path names, "$user"
// skipped, unquoted; "" when it names none.
func firstSchema(path string) string {
	for _, p := range strings.Split(path, ",") {
		p = strings.TrimSpace(p)
		if p == "" || p == `"$user"` || p == "$user" {
			continue
		}
		if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
			p = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		}
		return p
	}
	return ""
}

// siblings are the objects the migrations create beside the outbox table,
// qualified like it: tables and functions (triggers and indexes are named
// after the table by the "outbox_" prefix alone: they live in its schema
// anyway).
var siblings = []string{"_order_guard", "_check_row", "_key_partition", "_set_key_partition", "_partitioning", "_relays", "_partitions"}

// besides are the siblings named by sqlname.Beside (migration 00009's):
// the others keep the names sqlname.Sibling gave them before.
var besides = map[string]bool{"_key_partition": true, "_set_key_partition": true, "_partitioning": true, "_relays": true, "_partitions": true}

// partitionsRE is the placeholder of the partition count in the migrations.
var partitionsRE = regexp.MustCompile(`/\*PARTITIONS\*/256`)

// tableMigrations returns the migrations rendered for table and a number
// of key partitions (0: the default, 256): the name "outbox" of the files
// replaced by table's (quoted), the "outbox_" prefix of its indexes,
// constraints and triggers by the table's own name, the tables and
// functions beside it qualified like the table.
func tableMigrations(table string, partitions int, timePartitioned bool) (fs.FS, error) {
	if table == config.DefaultTable && (partitions == 0 || partitions == DefaultPartitions) && !timePartitioned {
		return Migrations(), nil
	}
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	if err := sqladmin.CheckTableName(table); err != nil {
		return nil, err
	}
	parts := strings.Split(table, ".")
	base := parts[len(parts)-1]
	quoted := sqlname.Quote(table)
	siblingREs := make([]*regexp.Regexp, len(siblings))
	for i, suffix := range siblings {
		siblingREs[i] = regexp.MustCompile(`\boutbox` + suffix + `\b`)
	}
	prefixRE := regexp.MustCompile(`\boutbox_(\w+)`)
	tableRE := regexp.MustCompile(`\boutbox\b`)
	literalRE := regexp.MustCompile(`'outbox'`)
	out := fstest.MapFS{}
	err := fs.WalkDir(Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Migrations(), path)
		if err != nil {
			return err
		}
		s := partitionsRE.ReplaceAllLiteralString(string(b), fmt.Sprintf("/*PARTITIONS*/%d", partitions))
		if timePartitioned && strings.HasPrefix(path, "00001_") {
			if s, err = timePartitionedTable(s); err != nil {
				return err
			}
		}
		if table == config.DefaultTable {
			out[path] = &fstest.MapFile{Data: []byte(s)}
			return nil
		}
		// Placeholders first, so that no replacement is replaced again
		// (the new names may contain "outbox" themselves).
		var names []string
		for i, re := range siblingREs {
			s = re.ReplaceAllLiteralString(s, fmt.Sprintf("\x00sibling%d\x00", i))
			name := sqlname.Sibling(table, siblings[i])
			if besides[siblings[i]] {
				name = sqlname.Beside(table, siblings[i])
			}
			names = append(names, fmt.Sprintf("\x00sibling%d\x00", i), name)
		}
		s = prefixRE.ReplaceAllString(s, "\x00prefix\x00$1")
		s = literalRE.ReplaceAllLiteralString(s, "\x00literal\x00")
		s = tableRE.ReplaceAllLiteralString(s, "\x00table\x00")
		names = append(names, "\x00prefix\x00", base+"_", "\x00literal\x00", sqlname.Literal(quoted), "\x00table\x00", quoted)
		s = strings.NewReplacer(names...).Replace(s)
		out[path] = &fstest.MapFile{Data: []byte(s)}
		return nil
	})
	return out, err
}

// createTableRE is migration 00001's storage clause, which a partitioned
// table refuses.
var createTableRE = regexp.MustCompile(`(?s)\n\) WITH \(.*?\n\);`)

// timePartitionedTable rewrites migration 00001 to create the table
// partitioned by RANGE (created_at) (MigrateOptions.TimePartitioned): the
// primary key becomes (id, created_at), as a partitioned table's unique
// keys must contain its partition key, and the storage parameters go to
// each partition instead (sqladmin.PartitionStorage).
func timePartitionedTable(s string) (string, error) {
	const pk = "id           uuid        PRIMARY KEY,"
	if strings.Count(s, pk) != 1 || len(createTableRE.FindAllStringIndex(s, -1)) != 1 {
		return "", errors.New("migration 00001 is not in the shape --time-partitioned rewrites")
	}
	s = strings.Replace(s, pk, "id           uuid        NOT NULL,", 1)
	s = strings.Replace(s, "    last_error   text\n", "    last_error   text,\n    PRIMARY KEY (id, created_at)\n", 1)
	return createTableRE.ReplaceAllLiteralString(s, "\n) PARTITION BY RANGE (created_at);"), nil
}

// versionTable names table's migration history table.
func versionTable(table string) string {
	if table == config.DefaultTable {
		return VersionTable
	}
	parts := strings.Split(table, ".")
	parts[len(parts)-1] += "_schema_migrations"
	return strings.Join(parts, ".")
}

func migrateDB(ctx context.Context, db *sql.DB, opts MigrateOptions) ([]Result, error) {
	table := opts.Table
	// goose polls the advisory lock (pg_try_advisory_lock) every 5 s by
	// default, so a concurrent migrate would wait up to 5 s after the lock
	// is free. Poll every second instead, still for up to 5 minutes in all
	// (period 1 s × failure threshold 300 = goose's default 300 s).
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	store, err := database.NewStore(database.DialectPostgres, versionTable(table))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	migrations, err := tableMigrations(table, opts.Partitions, opts.TimePartitioned)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider("", db, migrations,
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
