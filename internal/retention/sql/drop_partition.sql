-- Drops a partition (the partition slot, quoted as regclass prints it)
-- that droppable.sql found droppable under the table's lock.
DROP TABLE /* TEMPLATE: partition */
