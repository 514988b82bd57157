-- The functions of migrations 00009 and 00010, for an adopted table:
-- key_partition_fn, a row's key partition from its aggregate ID (the
-- project's hash, the same as outbox.KeyPartition: the first four bytes
-- of the SHA-256 of the ID's UTF-8 bytes, big-endian, modulo the number
-- of partitions), and set_key_partition_fn, the insert trigger's, which
-- fills in key_partition and payload_size (set_key_partition_body: the
-- literal of key_partition_trigger_body.sql). The partition count the
-- table has (an earlier adopt may have chosen it) goes into both, through
-- a DO block and format(); both run with search_path pg_catalog, pg_temp,
-- so that a writer's search_path cannot change what they call.
DO $adopt$ DECLARE n integer := (SELECT partitions FROM /* TEMPLATE: partitioning */); BEGIN
  EXECUTE format($f$CREATE OR REPLACE FUNCTION /* TEMPLATE: key_partition_fn */(aggregate_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
    AS 'SELECT (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer FROM (SELECT sha256(convert_to(aggregate_id, ''UTF8'')) AS h) s'$f$, n);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION /* TEMPLATE: set_key_partition_fn */() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
    AS /* TEMPLATE: set_key_partition_body */$f$, n);
END $adopt$
