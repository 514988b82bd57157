-- +goose Up
-- payload_size: how many bytes the row's payload takes in memory, so that
-- a claim can bound the bytes it returns (lease.Config.MaxBatchBytes)
-- without reading any payload: bounded by rows only, a claim of 500
-- payloads of 900 KB is 450 MB, and the relay holds three claims.
--
-- The value is pg_column_size of the new row's payload, taken by the
-- BEFORE INSERT trigger of migration 00009 (one function call per row, no
-- second trigger): in a BEFORE trigger the new value is not compressed
-- yet, so that is its uncompressed size, in O(1) (for jsonb, the binary
-- form's size, close to the JSON text the relay receives; jsonb_build_
-- object('pad', repeat('x', 900000)) gives 900,020). Once stored, the same
-- function gives the compressed size (that value: about 10 KB), useless as
-- a bound. A value that is already compressed in the trigger (INSERT ...
-- SELECT of another table's stored payload) is measured as text instead,
-- octet_length(payload::text), which reads it once; PostgreSQL 13, which
-- cannot tell (no pg_column_compression), takes pg_column_size as it is.
-- A NULL payload is 0.
--
-- Rows written before this migration (or with triggers off:
-- session_replication_role = replica) have no size: a claim counts each
-- as the whole bound, so it takes at most one of them, after what fits.
--
-- Adding the column is a catalog change, no table rewrite; the lock is
-- the one CREATE FUNCTION's trigger needs, held for the DDL only.
LOCK TABLE outbox IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE outbox ADD COLUMN IF NOT EXISTS payload_size integer;

-- The function keeps the table's partition count (migration 00009 fixed
-- it), read here, and computes key_partition as before.
-- +goose StatementBegin
DO $migration$
DECLARE
    n integer := (SELECT partitions FROM outbox_partitioning);
    size text := CASE WHEN current_setting('server_version_num')::integer >= 140000
        THEN $s$CASE WHEN pg_column_compression(NEW."payload") IS NULL THEN coalesce(pg_column_size(NEW."payload"), 0) ELSE octet_length(NEW."payload"::text) END$s$
        ELSE $s$coalesce(pg_column_size(NEW."payload"), 0)$s$ END;
BEGIN
    EXECUTE format($f$CREATE OR REPLACE FUNCTION outbox_set_key_partition() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    h bytea := sha256(convert_to(NEW."aggregate_id"::text, 'UTF8'));
BEGIN
    NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer;
    NEW.payload_size := %s;
    RETURN NEW;
END
$fn$$f$, n, size);
END
$migration$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $migration$
DECLARE
    n integer := (SELECT partitions FROM outbox_partitioning);
BEGIN
    EXECUTE format($f$CREATE OR REPLACE FUNCTION outbox_set_key_partition() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    h bytea := sha256(convert_to(NEW."aggregate_id"::text, 'UTF8'));
BEGIN
    NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer;
    RETURN NEW;
END
$fn$$f$, n);
END
$migration$;
-- +goose StatementEnd
ALTER TABLE outbox DROP COLUMN IF EXISTS payload_size;
