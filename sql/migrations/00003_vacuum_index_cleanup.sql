-- +goose Up
-- Published rows leave the partial indexes only when VACUUM removes their
-- dead index entries. Since PostgreSQL 14, VACUUM skips index cleanup when
-- fewer than 2% of the table's pages have dead tuples (INDEX_CLEANUP auto's
-- bypass), which on a large table of kept history is almost always: the
-- unpublished-rows indexes would then fill with dead entries. Claims start
-- at a floor above the published rows (package lease), but a dead letter or
-- a long backoff holds that floor down; with index cleanup always on, every
-- autovacuum keeps these indexes small.
--
-- A partitioned table (`migrate --time-partitioned`) has no storage of its
-- own and refuses storage parameters: each of its partitions gets them when
-- it is created (sql.EnsureTimePartitions).
-- +goose StatementBegin
DO $migration$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass) <> 'p' THEN
        ALTER TABLE outbox SET (vacuum_index_cleanup = on);
    END IF;
END
$migration$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $migration$
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass) <> 'p' THEN
        ALTER TABLE outbox RESET (vacuum_index_cleanup);
    END IF;
END
$migration$;
-- +goose StatementEnd
