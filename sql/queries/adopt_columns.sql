-- The relay's bookkeeping columns on an adopted table, all with defaults
-- (or nullable) so that the producers' INSERTs keep working: seq
-- (seq_column: seq_identity_column.sql or seq_nextval_column.sql), then
-- the columns migration 00001 gives the outbox table.
ALTER TABLE /* TEMPLATE: table */
  /* TEMPLATE: seq_column */
  ADD COLUMN IF NOT EXISTS headers jsonb,
  ADD COLUMN IF NOT EXISTS topic text,
  ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN IF NOT EXISTS published_at timestamptz,
  ADD COLUMN IF NOT EXISTS locked_until timestamptz,
  ADD COLUMN IF NOT EXISTS locked_by text,
  ADD COLUMN IF NOT EXISTS claim_token uuid,
  ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS last_error text,
  ADD COLUMN IF NOT EXISTS dead_lettered_at timestamptz
