-- Migration 00009's <table>_partitions for an adopted table: who owns
-- each key partition, since when, and how often it changed hands.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partitions */ (
    partition integer     PRIMARY KEY,
    owner     text,
    epoch     bigint      NOT NULL DEFAULT 0,
    since     timestamptz,
    handovers bigint      NOT NULL DEFAULT 0)
