-- The replica identity of the table @table (quoted) as it works (as
-- TableReport.ReplicaIdentity names it): 'full'; 'default' when the
-- table has a primary key, else 'none'; 'index' when its REPLICA IDENTITY
-- USING INDEX index exists, else 'none'; 'none' for NOTHING. A
-- publication that publishes the UPDATEs (DELETEs) of a table whose
-- identity is 'none' makes PostgreSQL refuse them (SQLSTATE 55000).
SELECT CASE c.relreplident
    WHEN 'f' THEN 'full'
    WHEN 'd' THEN CASE WHEN EXISTS (SELECT 1 FROM pg_index WHERE indrelid = c.oid AND indisprimary) THEN 'default' ELSE 'none' END
    WHEN 'i' THEN CASE WHEN EXISTS (SELECT 1 FROM pg_index WHERE indrelid = c.oid AND indisreplident) THEN 'index' ELSE 'none' END
    ELSE 'none' END
FROM pg_class c WHERE c.oid = @table::regclass
