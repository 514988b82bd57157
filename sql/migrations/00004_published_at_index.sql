-- +goose Up
-- The retention cleaner (package retention, `outbox-relay run --retention`)
-- deletes published rows older than the retention in small batches, oldest
-- first. Without an index on published_at each batch would scan the table,
-- and a table keeping days of history is large. The index is partial, so
-- unpublished rows (the hot end) are not in it; published_at only grows,
-- so new entries go to the right edge of the index. The mark's UPDATE of
-- published_at was never a HOT update (published_at is in the predicates of
-- the unpublished-rows indexes), so this adds one index entry per event and
-- takes nothing else away.
--
-- On a large existing table, CREATE INDEX blocks writers while it builds.
-- To avoid that, create it by hand first, outside a transaction:
--   CREATE INDEX CONCURRENTLY outbox_published_at_idx
--       ON outbox (published_at) WHERE published_at IS NOT NULL;
-- and this migration then finds it and does nothing.
CREATE INDEX IF NOT EXISTS outbox_published_at_idx
    ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS outbox_published_at_idx;
