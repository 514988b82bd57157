-- The table check (Metrics.CheckTable), every Config.Interval beside the
-- table gauges, after session_settings.sql: what a database setting can
-- change under a running relay without a word.
--
-- Its columns: whether the table is UNLOGGED; the sequence behind the
-- table's seqs (sequence_columns.sql: its last value, whether it was
-- called, whether it is UNLOGGED; NULLs from no_sequence_columns.sql for a
-- table without one); the first UNLOGGED partition of a partitioned table
-- (a partition of its own may be UNLOGGED; pg_partition_tree of a plain
-- table is the table alone, at level 0, so NULL there); the highest
-- unpublished seq and the seq of the row published last (one probe of a
-- partial index each); and the database's logical replication slots with
-- the WAL each keeps (the replication_slots slot: outboxsql.SlotsSQL), as
-- JSON.
SELECT (SELECT relpersistence = 'u' FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass), /* TEMPLATE: sequence_columns */,
  (SELECT min(u.oid::regclass::text) FROM pg_partition_tree(/* TEMPLATE: table_literal */::regclass) pt JOIN pg_class u ON u.oid = pt.relid
     WHERE pt.level > 0 AND u.relpersistence = 'u'),
  (SELECT o.seq FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL ORDER BY o.seq DESC LIMIT 1),
  (SELECT o.seq FROM /* TEMPLATE: table */ o WHERE o.published_at IS NOT NULL ORDER BY o.published_at DESC LIMIT 1),
  (SELECT coalesce(json_agg(json_build_object('name', s.name, 'plugin', s.plugin, 'active', s.active, 'retained_wal_bytes', s.retained)), '[]')
     FROM (/* TEMPLATE: replication_slots */) s (name, plugin, active, retained))
