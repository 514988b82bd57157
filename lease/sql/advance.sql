-- The lowest unpublished row at or above the floor (@floor), read after
-- advance_seq.sql and advance_vxid.sql: the floor never passes it.
--
-- It counts only in the partitions this relay owns (@owned_mask, indexed
-- by key partition; NULL: every row), the ones its claims take: with
-- several relays, another relay's backlog would otherwise hold this
-- relay's floor back, and each of its claims would walk every row the two
-- relays published since (their index entries stay until VACUUM) and
-- every row of the other's partitions. The floor drops when the relay
-- acquires partitions (Claimer.rebalance).
SELECT (SELECT min(o.seq) FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL AND o.seq >= @floor
  AND (@owned_mask::bool[] IS NULL OR coalesce((@owned_mask::bool[])[/* TEMPLATE: key_partition_o */ + 1], true)))
