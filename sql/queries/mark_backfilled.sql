-- Records that the backfill of key partitions is done (backfilled.sql),
-- and bumps the generation so that running relays rebalance.
UPDATE /* TEMPLATE: partitioning */ SET backfilled_at = now(), generation = generation + 1
