-- +goose Up
-- Partitions of the aggregate key space, so that several relays on one
-- table share the work instead of contending for it. Every row carries
-- key_partition, a number in [0, partitions) derived from its aggregate
-- ID alone; a relay claims only rows of the partitions it owns
-- (<table>_partitions), so the events of one aggregate are only ever
-- claimed by one relay, and no relay's claim waits for another's or steps
-- over rows another relay holds. The number of partitions is fixed when
-- this migration runs (default 256; `outbox-relay migrate --partitions`),
-- far above any relay count.
--
-- The hash is this project's own, stable across PostgreSQL versions and
-- platforms and the same in Go (outbox.KeyPartition): the first four
-- bytes of the SHA-256 of the aggregate ID's UTF-8 bytes, read as a
-- big-endian unsigned integer, modulo the number of partitions. (hashtext
-- is not guaranteed to stay the same across major versions.)
--
-- The column is filled by a BEFORE INSERT trigger, whatever writes the
-- row (outbox.Add, plain SQL, COPY), and nullable: adding it is a catalog
-- change, no table rewrite, so the ACCESS EXCLUSIVE lock lasts only the
-- DDL. Unpublished rows written before it are filled in afterwards by
-- `migrate` in batches of 1,000 rows, each its own short transaction
-- (sql.Migrate); <table>_partitioning.backfilled_at says when that was
-- done, and the relay refuses a table without it. There is no BEFORE
-- UPDATE trigger (it would lock every row the relay updates, see 00008):
-- changing an unpublished row's aggregate ID by hand is not supported, as
-- editing unpublished rows never was.
LOCK TABLE outbox IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE outbox ADD COLUMN IF NOT EXISTS key_partition integer;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_key_partition(aggregate_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) % /*PARTITIONS*/256)::integer
    FROM (SELECT sha256(convert_to(aggregate_id, 'UTF8')) AS h) s
$fn$;
-- +goose StatementEnd

-- The same expression as outbox_key_partition, inline: the function runs
-- with search_path pg_catalog (a writer's search_path must not change
-- what it calls), where the table's own schema is not.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_set_key_partition() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    h bytea := sha256(convert_to(NEW."aggregate_id"::text, 'UTF8'));
BEGIN
    NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) % /*PARTITIONS*/256)::integer;
    RETURN NEW;
END
$fn$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS outbox_key_partition_fill ON outbox;
CREATE TRIGGER outbox_key_partition_fill BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_set_key_partition();

-- One row: the partition count, a generation bumped by every change of
-- the relays or of the partitions' owners (every claim reads it, so relays
-- notice a join or a leave at their next claim), and when migrate finished
-- filling in key_partition.
CREATE TABLE IF NOT EXISTS outbox_partitioning (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions    integer     NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    generation    bigint      NOT NULL DEFAULT 0,
    backfilled_at timestamptz
);
INSERT INTO outbox_partitioning (partitions) VALUES (/*PARTITIONS*/256) ON CONFLICT DO NOTHING;

-- The relays running on the table, one row per process (member: its
-- --relay-id and a random suffix). Each renews until = now() + lease
-- every sixth of a lease. A relay's leases on rows never end later than
-- its until, so once until has passed, every row it leased is free again
-- and its partitions can change hands without breaking order.
CREATE TABLE IF NOT EXISTS outbox_relays (
    member     text        PRIMARY KEY,
    relay_id   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    renewed_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL
);

-- Who owns each partition (owner: an outbox_relays member, NULL: nobody),
-- since when, and how many times it changed hands; epoch grows with each
-- new owner.
CREATE TABLE IF NOT EXISTS outbox_partitions (
    partition integer     PRIMARY KEY,
    owner     text,
    epoch     bigint      NOT NULL DEFAULT 0,
    since     timestamptz,
    handovers bigint      NOT NULL DEFAULT 0
);
INSERT INTO outbox_partitions (partition)
    SELECT generate_series(0, /*PARTITIONS*/256 - 1) ON CONFLICT DO NOTHING;

-- +goose Down
DROP TRIGGER IF EXISTS outbox_key_partition_fill ON outbox;
DROP FUNCTION IF EXISTS outbox_set_key_partition();
DROP FUNCTION IF EXISTS outbox_key_partition(text);
DROP TABLE IF EXISTS outbox_partitions;
DROP TABLE IF EXISTS outbox_relays;
DROP TABLE IF EXISTS outbox_partitioning;
ALTER TABLE outbox DROP COLUMN IF EXISTS key_partition;
