-- The functions of migrations 00009 and 00010, for an adopted table:
-- key_partition_fn, a row's key partition from its aggregate ID (the
-- project's hash, the same as outbox.KeyPartition: the first four bytes
-- of the SHA-256 of the ID's UTF-8 bytes, big-endian, modulo the number
-- of partitions), and set_key_partition_fn, the insert trigger's, which
-- fills in key_partition and payload_size (set_key_partition_body: the
-- literal of key_partition_trigger_body.sql, itself a format() string).
-- The partition count the table has (an earlier adopt may have chosen it)
-- goes into both, through a DO block and format(); both run with
-- search_path pg_catalog, pg_temp, so that a writer's search_path cannot
-- change what they call. The functions' names reach format() as its
-- arguments (the *_literal slots), never inside its format string, so
-- that a '%' in a name is not read as a placeholder, and the DO block's
-- dollar quote (do_tag) is one that no name holds.
DO /* TEMPLATE: do_tag */ DECLARE n integer := (SELECT partitions FROM /* TEMPLATE: partitioning */); BEGIN
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$s(aggregate_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
    AS 'SELECT (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %2$s)::integer FROM (SELECT sha256(convert_to(aggregate_id, ''UTF8'')) AS h) s'$f$,
    /* TEMPLATE: key_partition_fn_literal */, n);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$s() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS %2$L$f$,
    /* TEMPLATE: set_key_partition_fn_literal */, format(/* TEMPLATE: set_key_partition_body */, n));
END /* TEMPLATE: do_tag */
