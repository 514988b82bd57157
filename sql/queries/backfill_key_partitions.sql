-- One batch of the backfill of key_partition, for the unpublished rows
-- that predate migration 00009 (rows inserted since get theirs from the
-- insert trigger): the next batch_size rows in seq order after seq
-- @after, through the unpublished rows' index, so that each batch reads
-- only its own rows and is its own transaction of a few milliseconds
-- (writers and relays are never held up behind it). Each row's partition
-- is key_partition_fn of its aggregate ID (the aggregate column). Returns
-- the batch's highest seq, where the next batch starts; NULL when no row
-- is left.
--
-- On a plain table a row is named by ctid; a partitioned table's
-- statement is backfill_key_partitions_partitioned.sql.
WITH batch AS (
  SELECT ctid, seq FROM /* TEMPLATE: table */ WHERE published_at IS NULL AND seq > @after ORDER BY seq LIMIT /* TEMPLATE: batch_size */
), filled AS (
  UPDATE /* TEMPLATE: table */ SET key_partition = /* TEMPLATE: key_partition_fn */(/* TEMPLATE: aggregate */::text)
  WHERE ctid = ANY(ARRAY(SELECT ctid FROM batch)) AND key_partition IS NULL
)
SELECT max(seq) FROM batch
