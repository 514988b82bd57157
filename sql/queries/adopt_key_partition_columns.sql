-- Adopt's version of migrations 00009 and 00010 (keyPartitionStatements),
-- first step: the key_partition and payload_size columns, filled in by
-- the insert trigger (create_key_partition_trigger.sql). Nullable: adding
-- them is a catalog change, no table rewrite.
ALTER TABLE /* TEMPLATE: table */ ADD COLUMN IF NOT EXISTS key_partition integer, ADD COLUMN IF NOT EXISTS payload_size integer
