-- Migration 00011's columns of <table>_partitioning for an adopted table:
-- its time partitions are its owner's (NULL), but the columns are read.
ALTER TABLE /* TEMPLATE: partitioning */ ADD COLUMN IF NOT EXISTS time_partition_interval interval, ADD COLUMN IF NOT EXISTS time_partitions_ahead integer
