-- The owners report: the key partitions' owners and the relays' membership.

-- name: CheckPartitions :one
-- Whether the key partitions' backfill (migration 00009) has finished;
-- no row, or a missing table, when the migration has not run.
SELECT backfilled_at IS NOT NULL FROM /* TEMPLATE: partitioning */

-- name: ReadPartitionCount :one
-- The table's number of key partitions (`outbox-relay status`).
SELECT partitions FROM /* TEMPLATE: partitioning */

-- name: ReadMembers :many
-- Every member, live or whose membership ran out (`outbox-relay status`),
-- read by column name into MemberOwnership.
SELECT member, relay_id, started_at, renewed_at, until, until > now() AS live FROM /* TEMPLATE: relays */ ORDER BY member

-- name: ReadOwners :many
-- The owner of each key partition ('' for nobody) and since when
-- (`outbox-relay status`).
SELECT partition, coalesce(owner, '') AS owner, since FROM /* TEMPLATE: partitions */ ORDER BY partition
