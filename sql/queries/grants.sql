-- The grants script (GrantScript): statements pgoutbox prints, not runs.

-- name: GrantRelayTable :exec
-- A statement of the grants script: the relay's claims and marks
-- (SELECT, UPDATE) and retention's deletes of published rows (DELETE) on
-- the outbox table.
GRANT SELECT, UPDATE, DELETE ON TABLE /* TEMPLATE: table */ TO /* TEMPLATE: role */;

-- name: GrantOrderGuard :exec
-- A statement of the grants script: the claims' order guard.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE /* TEMPLATE: guard */ TO /* TEMPLATE: role */;

-- name: GrantRelays :exec
-- A statement of the grants script: the members' heartbeat in
-- <table>_relays.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE /* TEMPLATE: relays */ TO /* TEMPLATE: role */;

-- name: GrantKeyPartitions :exec
-- A statement of the grants script: who owns which key partition
-- (<table>_partitions) and the generation (<table>_partitioning).
GRANT SELECT, UPDATE ON TABLE /* TEMPLATE: partitions */, /* TEMPLATE: partitioning */ TO /* TEMPLATE: role */;

-- name: GrantReadAllStats :exec
-- A statement of the grants script: the held-snapshot watch sees other
-- roles' transactions in pg_stat_activity (granting it needs a superuser,
-- or ADMIN OPTION on pg_read_all_stats).
GRANT pg_read_all_stats TO /* TEMPLATE: role */;

-- name: GrantWriter :exec
-- A statement of the grants script: a writer's INSERT (outbox.Add or a
-- plain INSERT); the seq identity needs no privilege on its sequence.
GRANT INSERT ON TABLE /* TEMPLATE: table */ TO /* TEMPLATE: role */;

-- name: GrantSequence :fragment
-- A fragment of GrantLookups: grants the role SELECT on the table's
-- seq sequence, whose last value the claim floor reads.
  EXECUTE format('GRANT SELECT ON SEQUENCE %s TO %s', pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq'), /* TEMPLATE: role_literal */);

-- name: GrantLookups :exec
-- A statement of the grants script (GrantScript), not run by pgoutbox:
-- grants the role (role_literal: its quoted name as a literal) USAGE on
-- the table's schema, and with sequence_grant (GrantSequence, or
-- nothing) SELECT on its seq sequence. Both are looked up where the script
-- runs (table_literal: the quoted table as a literal), so an unqualified
-- table is found through the search_path as the relay finds it.
DO $grant$
BEGIN
  EXECUTE format('GRANT USAGE ON SCHEMA %s TO %s', (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass), /* TEMPLATE: role_literal */);
/* TEMPLATE: sequence_grant */
END
$grant$;

-- name: GrantTimePartitions :exec
-- A statement of the grants script (GrantScript), not run by pgoutbox:
-- on a partitioned table (table_literal; nothing on a plain one), what
-- creating its time partitions and dropping old ones needs (ATTACH
-- PARTITION and DROP TABLE are the owner's): membership in the role that
-- owns the table, and in the owner of each of its partitions, and CREATE
-- on its schema, for the role (role_literal). A superuser owner is
-- refused with the reason and the fix: a member of a superuser role can
-- SET ROLE to it and so become a superuser itself.
DO $grant$
DECLARE
  o record;
BEGIN
  IF (SELECT relkind FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass) <> 'p' THEN
    RETURN;
  END IF;
  FOR o IN SELECT DISTINCT r.rolname, r.rolsuper FROM pg_partition_tree(/* TEMPLATE: table_literal */::regclass) pt
      JOIN pg_class c ON c.oid = pt.relid JOIN pg_roles r ON r.oid = c.relowner
      WHERE quote_ident(r.rolname) <> /* TEMPLATE: role_literal */ ORDER BY 1 LOOP
    IF o.rolsuper THEN
      RAISE EXCEPTION 'outbox table % is time-partitioned and it (or a partition of it) is owned by %, a superuser: creating and dropping its partitions needs membership in the owner role, and a member of a superuser role can SET ROLE to it and become a superuser, so this script does not grant it. Give the table and each of its partitions an owner role of its own, e.g. CREATE ROLE outbox_owner NOLOGIN; ALTER TABLE % OWNER TO outbox_owner; (the same for each partition), then run the script again',
        /* TEMPLATE: table_literal */, quote_ident(o.rolname), /* TEMPLATE: table_literal */;
    END IF;
    EXECUTE format('GRANT %I TO %s', o.rolname, /* TEMPLATE: role_literal */);
  END LOOP;
  EXECUTE format('GRANT CREATE ON SCHEMA %s TO %s', (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = /* TEMPLATE: table_literal */::regclass), /* TEMPLATE: role_literal */);
END
$grant$;
