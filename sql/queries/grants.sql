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
