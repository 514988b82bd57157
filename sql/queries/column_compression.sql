-- Whether the server has pg_column_compression (PostgreSQL 14+), which
-- the insert trigger's payload size needs (payload_size_compressed.sql;
-- payload_size.sql without it).
SELECT current_setting('server_version_num')::integer >= 140000
