-- The age of the oldest claimable row (lease.States.Claimable, the
-- claimable_o slot) of the key partitions member @member owns:
-- outbox_relay_oldest_claimable_age_seconds, read in the refresh's batch
-- while a relay is attached.
--
-- mask is the ownership of every key partition, indexed by partition as
-- the claim's own mask is (lease's claimArgs.Owned): a row counts when its
-- key partition is this member's. That is key_partition, or for a row
-- whose key_partition is NULL (written before migration 00009 and not
-- backfilled yet) the table's _key_partition function of its aggregate
-- ID, as in the claim (lease's key_partition_o slot).
WITH mask AS (
  SELECT array_agg(p.owner IS NOT DISTINCT FROM @member ORDER BY p.partition) AS m FROM /* TEMPLATE: partitions */ p
)
SELECT extract(epoch FROM now() - o.created_at)::float8 FROM /* TEMPLATE: table */ o
WHERE /* TEMPLATE: claimable_o */
  AND (SELECT m FROM mask)[coalesce(o.key_partition, /* TEMPLATE: key_partition */(o./* TEMPLATE: aggregate_id */::text)) + 1]
ORDER BY o.seq LIMIT 1
