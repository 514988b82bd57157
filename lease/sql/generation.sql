-- Read after each claim: the generation (a change means another relay
-- joined, left or moved partitions) and whether a member's membership
-- ran out (its partitions are free): either makes the next claim
-- rebalance first.
SELECT m.generation, EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.until <= now()) FROM /* TEMPLATE: partitioning */ m
