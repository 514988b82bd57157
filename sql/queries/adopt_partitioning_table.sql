-- Migration 00009's <table>_partitioning for an adopted table: one row,
-- the number of key partitions, a generation bumped by every change of
-- who owns what, and when the backfill finished.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partitioning */ (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions    integer     NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    generation    bigint      NOT NULL DEFAULT 0,
    backfilled_at timestamptz)
