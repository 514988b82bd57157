-- The current role's privileges on what the relay uses, in one statement
-- of catalog functions, for MissingPrivileges (docs/database.md): a role
-- without one of them fails one step of the relay, and the failing
-- statement names only the first privilege missing; this names them all.
-- Each object is found with to_regclass (quoted names): @table, its order
-- guard @guard, @partitioning, @relays and @partitions (migration 00009),
-- and its seq sequence (seq_of.sql); one that does not exist gives NULL,
-- not an error.
--
-- Returns the role; SELECT, UPDATE and DELETE on the table; SELECT,
-- INSERT, UPDATE and DELETE on the order guard; the sequence and SELECT
-- (or USAGE) on it; membership in pg_read_all_stats; SELECT and UPDATE on
-- <table>_partitioning; SELECT, INSERT, UPDATE and DELETE on
-- <table>_relays; SELECT and UPDATE on <table>_partitions; on a
-- partitioned table, membership in its owner role and CREATE on its
-- schema (NULL on a plain table); and the table's owner.
SELECT current_user::text,
  has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
  has_table_privilege(g.oid, 'SELECT'), has_table_privilege(g.oid, 'INSERT'), has_table_privilege(g.oid, 'UPDATE'), has_table_privilege(g.oid, 'DELETE'),
  s.oid::regclass::text, has_sequence_privilege(s.oid, 'SELECT') OR has_sequence_privilege(s.oid, 'USAGE'),
  pg_has_role('pg_read_all_stats', 'USAGE'),
  has_table_privilege(m.oid, 'SELECT'), has_table_privilege(m.oid, 'UPDATE'),
  has_table_privilege(r.oid, 'SELECT'), has_table_privilege(r.oid, 'INSERT'), has_table_privilege(r.oid, 'UPDATE'), has_table_privilege(r.oid, 'DELETE'),
  has_table_privilege(p.oid, 'SELECT'), has_table_privilege(p.oid, 'UPDATE'),
  (SELECT pg_has_role(k.relowner, 'USAGE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p'),
  (SELECT has_schema_privilege(k.relnamespace, 'CREATE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p'),
  (SELECT pg_get_userbyid(k.relowner)::text FROM pg_class k WHERE k.oid = c.oid)
FROM (SELECT to_regclass(@table) AS oid) c, (SELECT to_regclass(@guard) AS oid) g,
  (SELECT to_regclass(@partitioning) AS oid) m, (SELECT to_regclass(@relays) AS oid) r, (SELECT to_regclass(@partitions) AS oid) p,
  LATERAL (SELECT (/* TEMPLATE: seq_of */) AS oid) s
