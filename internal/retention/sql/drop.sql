-- Dropping time partitions whose rows are all past retention, in order.

-- name: LockTimeout :exec
-- The first statement of a partition's drop: the table's ACCESS EXCLUSIVE
-- lock (LockTable) is waited for at most Config.LockTimeout (the
-- slot, in milliseconds), since producers and relays queue behind a
-- waiting lock. SET takes no parameters, so the value is in the text.
SET LOCAL lock_timeout = /* TEMPLATE: lock_timeout_ms */

-- name: LockTimePartitions :exec
-- Serializes the creation and the dropping of the table's time partitions
-- (the slot: sqlname.XactLock of sqlname.LockTimePartitions on the table,
-- a transaction-level advisory lock, the one sql.CreateTimePartitions
-- takes too), so that several relays keeping them do not collide.
SELECT /* TEMPLATE: time_partitions_lock */

-- name: LockTable :exec
-- Locks the outbox table before a partition is dropped (DROP TABLE of a
-- partition takes this lock anyway): under it, Droppable is asked
-- again, so a row committed meanwhile keeps its partition.
LOCK TABLE /* TEMPLATE: table */ IN ACCESS EXCLUSIVE MODE

-- name: Droppable :one
-- Whether the partition (the partition slot, quoted as regclass prints
-- it) may be dropped: every row in it is published (so none is a dead
-- letter either: a dead letter is never published), the last of them
-- more than @retention_us microseconds (Config.Retention) ago by the
-- database clock. An empty partition may be dropped.
SELECT NOT EXISTS (SELECT 1 FROM /* TEMPLATE: partition */ WHERE published_at IS NULL)
  AND coalesce((SELECT max(published_at) FROM /* TEMPLATE: partition */), '-infinity') < now() - @retention_us * interval '1 microsecond'

-- name: DropPartition :exec
-- Drops a partition (the partition slot, quoted as regclass prints it)
-- that Droppable found droppable under the table's lock.
DROP TABLE /* TEMPLATE: partition */
