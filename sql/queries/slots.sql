-- The logical replication slots of the current database (SlotsSQL), by
-- name: name, plugin, whether a client streams from it, and the WAL the
-- server keeps for it, NULL on a standby (where pg_current_wal_lsn()
-- cannot run) and for a slot without restart_lsn. A slot nobody reads (a
-- Debezium connector that was removed) keeps WAL until the disk fills.
SELECT slot_name::text, coalesce(plugin::text, ''), active,
  CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint END
FROM pg_replication_slots WHERE slot_type = 'logical' AND database = current_database() ORDER BY slot_name
