-- Creates a time partition (partition: schema-qualified, quoted) as a
-- table of its own, like the outbox table with its defaults and
-- constraints and with the storage parameters every partition gets
-- (storage: PartitionStorage); attach_time_partition.sql then attaches
-- it. Created so, and not with CREATE TABLE ... PARTITION OF, which would
-- lock the table ACCESS EXCLUSIVE: attaching locks it in SHARE UPDATE
-- EXCLUSIVE mode only, so producers and relays go on meanwhile.
CREATE TABLE /* TEMPLATE: partition */ (LIKE /* TEMPLATE: table */ INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (/* TEMPLATE: storage */)
