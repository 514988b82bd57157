-- +goose Up
-- The outbox table. Applications insert one row per event in the same
-- transaction as their business change; outbox-relay claims, publishes and
-- marks them. The seed's plain INSERT (id, aggregate_id, event_type, payload)
-- is enough: every other column has a default.
--
-- fillfactor 80 leaves room on each page so that the claim's update (which
-- touches only locked_until, locked_by and claim_token, none of them indexed)
-- can be a HOT update: no new index entries, no index bloat (too little room:
-- migration 00006 lowers it to 40, see there). Autovacuum runs
-- on 1% of changed rows instead of 20%, because every row is updated twice.
CREATE TABLE IF NOT EXISTS outbox (
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    id           uuid        PRIMARY KEY,
    aggregate_id text        NOT NULL,
    event_type   text        NOT NULL,
    payload      jsonb,
    headers      jsonb,
    topic        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    locked_until timestamptz,
    locked_by    text,
    claim_token  uuid,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text
) WITH (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.01
);

-- Claim order: the lowest seq among unpublished rows. Published rows leave
-- this index, so millions of kept published rows cost the claim nothing.
CREATE INDEX IF NOT EXISTS outbox_unpublished_seq_idx
    ON outbox (seq) WHERE published_at IS NULL;

-- Per-aggregate order guard: "is an earlier event of this aggregate still
-- leased or backing off?" is one probe of this index per candidate row.
CREATE INDEX IF NOT EXISTS outbox_unpublished_aggregate_idx
    ON outbox (aggregate_id, seq) WHERE published_at IS NULL;

-- +goose Down
DROP TABLE IF EXISTS outbox;
