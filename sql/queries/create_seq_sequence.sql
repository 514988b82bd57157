-- The sequence of seq on an adopted partitioned table that has
-- partitions (seq_nextval_column.sql): PostgreSQL (before 17) refuses to
-- add an identity column to such a table.
CREATE SEQUENCE IF NOT EXISTS /* TEMPLATE: sequence */ AS bigint
