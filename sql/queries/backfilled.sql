-- Whether the key partitions of the table's unpublished rows written
-- before migration 00009 have been filled in (<table>_partitioning's
-- backfilled_at, mark_backfilled.sql): migrate and adopt skip the
-- backfill then, and the relay refuses a table without it.
SELECT backfilled_at IS NOT NULL FROM /* TEMPLATE: partitioning */
