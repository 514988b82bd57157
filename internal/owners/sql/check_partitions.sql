-- Whether the key partitions' backfill (migration 00009) has finished;
-- no row, or a missing table, when the migration has not run.
SELECT backfilled_at IS NOT NULL FROM /* TEMPLATE: partitioning */
