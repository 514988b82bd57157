-- The publications that cover the table @table (quoted), FOR ALL TABLES
-- ones included (pg_publication_tables lists what each publishes), by
-- name: whether each is FOR ALL TABLES and whether it publishes UPDATEs
-- and DELETEs. Catalog lookups only.
SELECT p.pubname::text, p.puballtables, p.pubupdate, p.pubdelete FROM pg_publication p
WHERE EXISTS (SELECT 1 FROM pg_publication_tables pt JOIN pg_class c ON c.relname = pt.tablename
  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = pt.schemaname
  WHERE pt.pubname = p.pubname AND c.oid = @table::regclass)
ORDER BY p.pubname
