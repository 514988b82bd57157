-- A fragment, not a statement: the size migration 00010's trigger writes
-- to payload_size, for the payload column of the new row (payload: the
-- column, quoted): its pg_column_size, uncompressed in a BEFORE INSERT
-- trigger, O(1); a value already compressed there (INSERT ... SELECT of a
-- stored payload) is measured as text instead. NULL is 0. Needs
-- pg_column_compression (PostgreSQL 14+; payload_size.sql before).
CASE WHEN pg_column_compression(NEW./* TEMPLATE: payload */) IS NULL THEN coalesce(pg_column_size(NEW./* TEMPLATE: payload */), 0) ELSE octet_length(NEW./* TEMPLATE: payload */::text) END
