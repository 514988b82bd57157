-- The schema of the table @table (quoted), wherever the search_path found
-- it: its time partitions and adopt's row-check function go there.
SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = @table::regclass
