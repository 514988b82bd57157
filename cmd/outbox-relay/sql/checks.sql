-- The start-up checks of run and the other commands.

-- name: CheckTable :exec
-- The check of the outbox table before run or a command reads it: it
-- returns no row, and fails when the table is missing (SQLSTATE 42P01:
-- not migrated) or lacks a column the relay reads or writes (42703: not
-- an outbox table of this version, or the --debezium and --column-* flags
-- do not match it); checkTable turns each into its fix.
--
-- event_columns are the configured columns (the ID, aggregate ID, event
-- type and payload columns, and the aggregate type column when mapped),
-- quoted; the others are the outbox's own.
SELECT /* TEMPLATE: event_columns */, seq, headers, topic, created_at, published_at, locked_until, locked_by, claim_token,
  attempts, last_error, dead_lettered_at, key_partition, payload_size
FROM /* TEMPLATE: table */ LIMIT 0

-- name: CheckOrderGuard :exec
-- The check of the claims' order guard beside the outbox table (guard:
-- <table>_order_guard, sqlname.OrderGuard), after CheckTable: it
-- returns no row, and fails when the guard is missing (SQLSTATE 42P01),
-- e.g. for a table adopted by a version that named the guard of a long
-- table name differently; adopt or migrate creates it.
SELECT key, until FROM /* TEMPLATE: guard */ LIMIT 0

-- name: UnpublishedCount :one
-- The number of unpublished rows of the table (read by the partial index
-- of unpublished rows): adopt says how many rows already in the table the
-- relay will publish when it starts.
SELECT count(*) FROM /* TEMPLATE: table */ WHERE published_at IS NULL
