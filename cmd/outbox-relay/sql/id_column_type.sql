-- The type of the outbox table's ID column, as format_type spells it
-- (uuid, text, bigint, character varying(64)...), read by inspect before
-- the event (event.sql), which casts the ID it is given to that type so
-- that the primary key's index finds the row: an adopted table's ID may
-- be text or bigint.
--
-- @table is the table's quoted name (read as regclass), @column the ID
-- column's name.
SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = @table::regclass AND attname = @column
