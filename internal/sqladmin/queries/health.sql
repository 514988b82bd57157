-- The health checks' statements: the sequence, replication slots,
-- publications and replica identity.

-- name: MaxSeq :one
-- The table's highest seq, 0 when it is empty, for Inspect's comparison
-- with its sequence (SequenceState). It reads the whole table: a
-- moment on a large one.
SELECT coalesce(max(seq), 0) FROM /* TEMPLATE: table */

-- name: SequenceState :one
-- The state of the table's seq sequence (sequence: its name as regclass
-- prints it, which is also @sequence): its last value and whether nextval
-- has returned it (then the next value is one more), and whether the
-- sequence is unlogged. Inspect compares the next value with the table's
-- highest seq (MaxSeq): a sequence restarted below it (a
-- logical-replication cutover does not carry sequences over) makes new
-- events sort below published ones.
SELECT last_value, is_called, (SELECT relpersistence = 'u' FROM pg_class WHERE oid = @sequence::regclass) AS unlogged FROM /* TEMPLATE: sequence */

-- name: SequenceFix :exec
-- Not run by pgoutbox: the statement SequenceBehindError.Fix gives to run
-- by hand, which moves the table's seq sequence (found by the table's
-- name, table_literal: as a person would type it, as a literal) past the
-- table's highest seq (max_seq), so that new events sort above the
-- published ones again.
SELECT setval(pg_get_serial_sequence(/* TEMPLATE: table_literal */,'seq'), /* TEMPLATE: max_seq */)

-- name: Slots :many
-- The logical replication slots of the current database (SlotsSQL), by
-- their name: name, plugin, whether a client streams from it, and the WAL the
-- server keeps for it, NULL on a standby (where pg_current_wal_lsn()
-- cannot run) and for a slot without restart_lsn. A slot nobody reads (a
-- Debezium connector that was removed) keeps WAL until the disk fills.
SELECT slot_name::text AS name, coalesce(plugin::text, '') AS plugin, active,
  CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint END AS retained_wal_bytes
FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database() ORDER BY slot_name

-- name: Publications :many
-- The publications that cover the table @table (quoted), FOR ALL TABLES
-- ones included (pg_publication_tables lists what each publishes), by
-- their name: whether each is FOR ALL TABLES and whether it publishes UPDATEs
-- and DELETEs. Catalog lookups only.
SELECT p.pubname::text AS name, p.puballtables AS all_tables, p.pubupdate AS updates, p.pubdelete AS deletes FROM pg_publication p
WHERE EXISTS (SELECT 1 FROM pg_publication_tables pt JOIN pg_class c ON c.relname = pt.tablename
  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = pt.schemaname
  WHERE pt.pubname = p.pubname AND c.oid = @table::regclass)
ORDER BY p.pubname

-- name: ReplicaIdentity :one
-- The replica identity of the table @table (quoted) as it works (as
-- TableReport.ReplicaIdentity names it): 'full'; 'default' when the
-- table has a primary key, else 'none'; 'index' when its REPLICA IDENTITY
-- USING INDEX index exists, else 'none'; 'none' for NOTHING. A
-- publication that publishes the UPDATEs (DELETEs) of a table whose
-- identity is 'none' makes PostgreSQL refuse them (SQLSTATE 55000).
SELECT CASE c.relreplident
    WHEN 'f' THEN 'full'
    WHEN 'd' THEN CASE WHEN EXISTS (SELECT 1 FROM pg_index WHERE indrelid = c.oid AND indisprimary) THEN 'default' ELSE 'none' END
    WHEN 'i' THEN CASE WHEN EXISTS (SELECT 1 FROM pg_index WHERE indrelid = c.oid AND indisreplident) THEN 'index' ELSE 'none' END
    ELSE 'none' END
FROM pg_class c WHERE c.oid = @table::regclass
