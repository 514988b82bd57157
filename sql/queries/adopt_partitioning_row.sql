-- The row of <table>_partitioning, with the number of key partitions
-- (partition_count) unless an earlier adopt chose it: an adopted table
-- keeps its partition count.
INSERT INTO /* TEMPLATE: partitioning */ (partitions) VALUES (/* TEMPLATE: partition_count */) ON CONFLICT DO NOTHING
