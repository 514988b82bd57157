-- +goose Up
-- fillfactor 40, not 80. The claim's update touches only columns no index
-- covers (locked_until, locked_by, claim_token), so it can be a HOT update
-- (no new index entries), but only if the new row version fits on the same
-- page. Rows are inserted and claimed in seq order, so one claim updates
-- every row of a page at once and needs room for a copy of each, and the
-- copy is wider than the row (it gains the lease columns, locked_by up to
-- a pod name's length): a bit more than half the page. At 80 about a fifth
-- of a page's rows were HOT and the rest made three index insertions each.
-- Measured (claim+mark loop over 200,000 rows, 500 per claim, fsync on):
-- 5.0 ms per claim at 80, 2.6 ms at 50; 60 and 70 no better than 80; 50
-- still moved 7% of rows of 250 bytes and 18% of rows of 110 bytes, 40 none
-- (lease.TestClaimUpdatesStayOnTheirPage). The table is smaller too, since
-- the non-HOT copies bloated it: after 200,000 events claimed, marked and
-- vacuumed, 145 MB at 80, 113 MB at 40. It applies to pages filled from
-- now on. A partitioned table refuses storage parameters: its partitions
-- get fillfactor 40 when they are created (sql.EnsureTimePartitions).
-- +goose StatementBegin
DO $migration$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass) <> 'p' THEN
        ALTER TABLE outbox SET (fillfactor = 40);
    END IF;
END
$migration$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $migration$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass) <> 'p' THEN
        ALTER TABLE outbox SET (fillfactor = 80);
    END IF;
END
$migration$;
-- +goose StatementEnd
