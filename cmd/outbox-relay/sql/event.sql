-- The inspect command's event: the row whose ID is @id, given as text and
-- cast to the ID column's type (id_type, read by id_column_type.sql: uuid,
-- text, bigint...) so that the primary key's index finds it. No row when
-- there is none; an ID that is not of that type fails with SQLSTATE 22P02,
-- which inspect also reports as not found.
--
-- Columns: seq, topic, the aggregate type (aggregate_type_o: the mapped
-- column as text, or NULL::text), the aggregate ID and event type as
-- text, created_at (NULL when it is not a finite time), published_at,
-- attempts, last_error, dead_lettered_at, locked_by, locked_until (NULL
-- for 'infinity') and whether it is 'infinity' (a dead letter holding
-- back its aggregate), the database's now(), and the row's state
-- (state_o: lease.States.State on alias o, the claim's own predicates).
SELECT o.seq, o.topic, /* TEMPLATE: aggregate_type_o */, o./* TEMPLATE: aggregate_id */::text, o./* TEMPLATE: event_type */::text,
  CASE WHEN isfinite(o.created_at) THEN o.created_at END, o.published_at, o.attempts, o.last_error,
  o.dead_lettered_at, o.locked_by, NULLIF(o.locked_until, 'infinity'), coalesce(o.locked_until = 'infinity', false), now(),
  /* TEMPLATE: state_o */
FROM /* TEMPLATE: table */ o WHERE o./* TEMPLATE: id */ = CAST(@id::text AS /* TEMPLATE: id_type */)
