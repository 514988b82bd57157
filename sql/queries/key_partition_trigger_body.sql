-- A fragment, not a statement: the body of an adopted table's insert
-- trigger function (adopt_key_partition_functions.sql), which fills in a
-- new row's key_partition from its aggregate ID (aggregate: its column,
-- quoted) and its payload_size (payload_size.sql or
-- payload_size_compressed.sql, its % doubled). It is a format() string:
-- %s is the number of key partitions, %% a %.
DECLARE h bytea := sha256(convert_to(NEW./* TEMPLATE: aggregate */::text, 'UTF8')); BEGIN NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer; NEW.payload_size := /* TEMPLATE: payload_size */; RETURN NEW; END
