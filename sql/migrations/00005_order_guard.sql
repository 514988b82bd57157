-- +goose Up
-- When the claim's per-aggregate order guard is needed. The guard (one index
-- probe per candidate row, about 60% of a claim's cost) only matters while
-- some row could block a later event of its aggregate: a row leased by
-- another relay, or a row backing off or dead-lettered with hold. Rows here:
--   'relay:<holder>'  until = when that relay's newest lease ends (written
--                     by each of its claims, in the claim's transaction);
--   'holds'           until = a backing-off or held dead-lettered row may
--                     exist until then ('infinity' while a held dead letter
--                     may exist; recomputed by requeue).
-- A claim skips the guard when no row other than its own relay's has
-- until > now().
CREATE TABLE IF NOT EXISTS outbox_order_guard (
    key   text        PRIMARY KEY,
    until timestamptz NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS outbox_order_guard;
