-- Makes dead letters claimable again with attempts reset to 0 (last_error
-- is kept for the record): the events whose ID, as text, is one of @ids,
-- or every dead letter when @ids is NULL. Rows are named by event ID, not
-- by row address, so this statement is the same on a partitioned table.
UPDATE /* TEMPLATE: table */
SET dead_lettered_at = NULL, locked_until = NULL, attempts = 0
WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL AND (@ids::text[] IS NULL OR /* TEMPLATE: id */::text = ANY(@ids::text[]))
