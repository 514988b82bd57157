-- A fragment of adopt_columns.sql: seq as an identity column, whose
-- sequence the table owns; adding it fills it in for the existing rows,
-- which rewrites the table.
ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY,
