-- Attaches a time partition created by create_time_partition.sql for the
-- rows with created_at in [from, to) (timestamptz literals, UTC):
-- PostgreSQL gives it the table's indexes and row triggers. It takes SHARE
-- UPDATE EXCLUSIVE on the table, ACCESS EXCLUSIVE on its DEFAULT
-- partition (whose rows it checks).
ALTER TABLE /* TEMPLATE: table */ ATTACH PARTITION /* TEMPLATE: partition */ FOR VALUES FROM (/* TEMPLATE: from */) TO (/* TEMPLATE: to */)
