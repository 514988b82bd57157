-- A statement of the grants script (GrantScript), not run by pgoutbox:
-- grants the role (role_literal: its quoted name as a literal) USAGE on
-- the table's schema, and with sequence_grant (grant_sequence.sql, or
-- nothing) SELECT on its seq sequence. Both are looked up where the script
-- runs (table_literal: the quoted table as a literal), so an unqualified
-- table is found through the search_path as the relay finds it.
DO $grant$
BEGIN
  EXECUTE format('GRANT USAGE ON SCHEMA %s TO %s', (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass), /* TEMPLATE: role_literal */);
/* TEMPLATE: sequence_grant */
END
$grant$;
