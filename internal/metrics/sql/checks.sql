-- The table check and the readiness checks.

-- name: TableCheck :one
-- The table check (Metrics.CheckTable), every Config.Interval beside the
-- table gauges, after SessionSettings: what a database setting can
-- change under a running relay without a word.
--
-- Its columns: whether the table is UNLOGGED; the sequence behind the
-- table's seqs (SequenceColumns: its last value, whether it was
-- called, whether it is UNLOGGED; NULLs from NoSequenceColumns for a
-- table without one); the first UNLOGGED partition of a partitioned table
-- (a partition of its own may be UNLOGGED; pg_partition_tree of a plain
-- table is the table alone, at level 0, so NULL there); the highest
-- unpublished seq and the seq of the row published last (one probe of a
-- partial index each); the rows in the DEFAULT partition of a
-- partitioned table (DefaultRows, NULL from NoDefaultRows); and the
-- database's logical replication slots with
-- the WAL each keeps (the replication_slots slot: sqladmin.SlotsSQL), as
-- JSON.
SELECT (SELECT relpersistence = 'u' FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass) AS unlogged, /* TEMPLATE: sequence_columns */,
  (SELECT min(u.oid::regclass::text) FROM pg_partition_tree(/* TEMPLATE: table_literal */::regclass) pt JOIN pg_class u ON u.oid = pt.relid
     WHERE pt.level > 0 AND u.relpersistence = 'u') AS unlogged_partition,
  (SELECT o.seq FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL ORDER BY o.seq DESC LIMIT 1) AS max_unpublished,
  (SELECT o.seq FROM /* TEMPLATE: table */ o WHERE o.published_at IS NOT NULL ORDER BY o.published_at DESC LIMIT 1) AS last_published,
  /* TEMPLATE: default_rows */,
  (SELECT coalesce(json_agg(json_build_object('name', s.name, 'plugin', s.plugin, 'active', s.active, 'retained_wal_bytes', s.retained)), '[]')
     FROM (/* TEMPLATE: replication_slots */) s (name, plugin, active, retained)) AS slots

-- name: SequenceColumns :fragment
-- A fragment of TableCheck (three of its columns), not a statement:
-- the table's seq sequence (the sequence slot, quoted as regclass prints
-- it; sequence_literal, the same as a string literal), which the table
-- check looks up at its first run: its last value and whether nextval has
-- handed that value out yet (the next seq), and whether the sequence is
-- UNLOGGED (a crash then restarts it).
(SELECT last_value FROM /* TEMPLATE: sequence */) AS last_value, (SELECT is_called FROM /* TEMPLATE: sequence */) AS is_called,
  (SELECT relpersistence = 'u' FROM pg_class WHERE oid = /* TEMPLATE: sequence_literal */::regclass) AS sequence_unlogged

-- name: NoSequenceColumns :fragment
-- A fragment of TableCheck (three of its columns), not a statement:
-- SequenceColumns's columns for a table whose seq column has no
-- sequence: nothing to check.
NULL::bigint AS last_value, NULL::bool AS is_called, NULL::bool AS sequence_unlogged

-- name: OldestSnapshot :one
-- The oldest snapshot of another session in this database, and the oldest
-- prepared transaction, whichever has been open longest (Metrics.OldestSnapshot,
-- outbox_oldest_snapshot_age_seconds): while either runs, VACUUM cannot
-- remove the outbox table's dead row versions.
--
-- Columns: pid (0 for a prepared transaction), application_name, user,
-- state, client address, the transaction's age in seconds, and how many
-- transaction IDs behind the current one its snapshot is.
SELECT pid, coalesce(application_name, '') AS application_name, coalesce(usename::text, '') AS usename, coalesce(state, '') AS state,
  coalesce(host(client_addr), '') AS client_addr, extract(epoch FROM now() - xact_start)::float8 AS age_seconds, age(backend_xmin)::bigint AS xmin_age
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND xact_start IS NOT NULL
UNION ALL
SELECT 0, '', owner::text, 'prepared', '', extract(epoch FROM now() - prepared)::float8, age(transaction)::bigint
FROM pg_prepared_xacts WHERE database = current_database()
ORDER BY 6 DESC LIMIT 1

-- name: SnapshotVisibility :one
-- Whether this role sees every role's sessions in pg_stat_activity
-- (OldestSnapshot): without the privileges of pg_read_all_stats (or
-- a superuser's) their xact_start and backend_xmin read as NULL. Read
-- once, at the refresher's start.
SELECT current_user::text AS role, pg_has_role('pg_read_all_stats', 'USAGE') AS read_all_stats

-- name: Recovery :one
-- The "database" readiness check: whether the server is in recovery (a
-- standby, where claims cannot write), and its address for the message.
SELECT pg_is_in_recovery() AS in_recovery, host(inet_server_addr()) AS host, inet_server_port() AS port

-- name: DefaultRows :fragment
-- A fragment of TableCheck (one of its columns), not a statement: the
-- rows in the table's DEFAULT partition (default: as regclass prints it),
-- which the check looks up at its first run: rows no time partition
-- covers (outbox_default_partition_rows). Normally none, so the count is
-- cheap, and bounded: counted up to 100,000.
(SELECT count(*) FROM (SELECT FROM /* TEMPLATE: default */ LIMIT 100000) d) AS default_rows

-- name: NoDefaultRows :fragment
-- A fragment of TableCheck, not a statement: DefaultRows's column for a
-- table without a DEFAULT partition (a plain table).
NULL::bigint AS default_rows
