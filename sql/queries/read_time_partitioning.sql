-- A table's time partitioning as <table>_partitioning records it
-- (migration 00011): the interval in seconds and the partitions kept
-- ahead, NULL when pgoutbox does not keep the table's time partitions.
-- Through to_jsonb: a table from before migration 00011 (or adopted
-- before it) lacks the columns, and a missing column would abort the
-- caller's transaction.
SELECT extract(epoch FROM (to_jsonb(m)->>'time_partition_interval')::interval)::bigint, (to_jsonb(m)->>'time_partitions_ahead')::int
FROM /* TEMPLATE: partitioning */ m
