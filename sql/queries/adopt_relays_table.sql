-- Migration 00009's <table>_relays for an adopted table: the members
-- sharing the key partitions, each alive until its until.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: relays */ (
    member     text        PRIMARY KEY,
    relay_id   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    renewed_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL)
