-- The LISTEN session turns off idle_session_timeout and
-- idle_in_transaction_session_timeout where they are set: the session
-- idles between notifications by design, and a timeout would close it
-- and lose the notifications sent while it reconnects.
SELECT set_config(name, '0', false) FROM pg_settings
WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout') AND setting <> '0'
