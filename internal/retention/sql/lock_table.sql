-- Locks the outbox table before a partition is dropped (DROP TABLE of a
-- partition takes this lock anyway): under it, droppable.sql is asked
-- again, so a row committed meanwhile keeps its partition.
LOCK TABLE /* TEMPLATE: table */ IN ACCESS EXCLUSIVE MODE
