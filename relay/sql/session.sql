-- The relay's own statements: its sessions' settings and the start-up
-- check of the table (claiming and marking are lease's).

-- name: PoolSettings :exec
-- A pooled session of the relay overrides the database settings that
-- would break or churn it (relay.ConfigurePool): idle_session_timeout
-- off, and a statement_timeout shorter than @db_timeout_ms (the relay's
-- own bound on every statement, Config.DBTimeout, in milliseconds) raised
-- to it. Only settings that are set change, so the statement does nothing
-- on a database without them and runs on PostgreSQL 13 (which has no
-- idle_session_timeout). Sent with the simple protocol: no prepared
-- statement, whatever pooler is in between.
SELECT set_config(name, CASE name WHEN 'statement_timeout' THEN @db_timeout_ms::text ELSE '0' END, false)
FROM pg_settings
WHERE name = 'idle_session_timeout' AND setting <> '0'
   OR name = 'statement_timeout' AND setting <> '0' AND setting::bigint < @db_timeout_ms::bigint

-- name: ListenerSettings :exec
-- The LISTEN session turns off idle_session_timeout and
-- idle_in_transaction_session_timeout where they are set: the session
-- idles between notifications by design, and a timeout would close it
-- and lose the notifications sent while it reconnects.
SELECT set_config(name, '0', false) FROM pg_settings
WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout') AND setting <> '0'

-- name: CheckTable :exec
-- Whether the outbox table exists (and this role may read it): the relay
-- checks it at start to fail at once with the command that creates it.
-- LIMIT 0 reads no row.
SELECT FROM /* TEMPLATE: table */ LIMIT 0
