-- A fragment, not a statement: the size migration 00010's trigger writes
-- to payload_size, for the payload column of the new row (payload: the
-- column, quoted), on PostgreSQL 13, which has no pg_column_compression:
-- pg_column_size alone. NULL is 0. payload_size_compressed.sql is the
-- size on later versions.
coalesce(pg_column_size(NEW./* TEMPLATE: payload */), 0)
