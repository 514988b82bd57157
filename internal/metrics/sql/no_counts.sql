-- A fragment of table_stats.sql (its last two columns), not a statement:
-- what an early refresh reads instead of the counts (counts.sql), whose
-- scan grows with the backlog. The count gauges keep their last values.
NULL::bigint, NULL::bigint
