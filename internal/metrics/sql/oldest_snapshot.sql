-- The oldest snapshot of another session in this database, and the oldest
-- prepared transaction, whichever has been open longest (Metrics.OldestSnapshot,
-- outbox_oldest_snapshot_age_seconds): while either runs, VACUUM cannot
-- remove the outbox table's dead row versions.
--
-- Columns: pid (0 for a prepared transaction), application_name, user,
-- state, client address, the transaction's age in seconds, and how many
-- transaction IDs behind the current one its snapshot is.
SELECT pid, coalesce(application_name, ''), coalesce(usename::text, ''), coalesce(state, ''),
  coalesce(host(client_addr), ''), extract(epoch FROM now() - xact_start)::float8, age(backend_xmin)::bigint
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND xact_start IS NOT NULL
UNION ALL
SELECT 0, '', owner::text, 'prepared', '', extract(epoch FROM now() - prepared)::float8, age(transaction)::bigint
FROM pg_prepared_xacts WHERE database = current_database()
ORDER BY 6 DESC LIMIT 1
