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
