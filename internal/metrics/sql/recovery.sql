-- The "database" readiness check: whether the server is in recovery (a
-- standby, where claims cannot write), and its address for the message.
SELECT pg_is_in_recovery(), host(inet_server_addr()), inet_server_port()
