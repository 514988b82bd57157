-- The inspect command's statements.

-- name: IDColumnType :one
-- The type of the outbox table's ID column, as format_type spells it
-- (uuid, text, bigint, character varying(64)...), read by inspect before
-- the event (Event), which casts the ID it is given to that type so
-- that the primary key's index finds the row: an adopted table's ID may
-- be text or bigint.
--
-- @table is the table's quoted name (read as regclass), @column the ID
-- column's name.
SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = @table::regclass AND attname = @column

-- name: Event :one
-- The inspect command's event: the row whose ID is @id, given as text and
-- cast to the ID column's type (id_type, read by IDColumnType: uuid,
-- text, bigint...) so that the primary key's index finds it. No row when
-- there is none; an ID that is not of that type fails with SQLSTATE 22P02,
-- which inspect also reports as not found.
--
-- Columns: seq, topic, the aggregate type (aggregate_type_o: the mapped
-- column as text, or NULL::text), the aggregate ID and event type as
-- text, created_at (NULL when it is not a finite time), published_at,
-- attempts, last_error, dead_lettered_at, locked_by, locked_until (NULL
-- for 'infinity') and whether it is 'infinity' (a dead letter holding
-- back its aggregate), the database's now(), the row's state
-- (state_o: lease.States.State on alias o, the claim's own predicates),
-- and its payload and headers (to check the payload against its schema).
SELECT o.seq, o.topic, /* TEMPLATE: aggregate_type_o */ AS aggregate_type, o./* TEMPLATE: aggregate_id */::text AS aggregate_id,
  o./* TEMPLATE: event_type */::text AS event_type,
  CASE WHEN isfinite(o.created_at) THEN o.created_at END AS created_at, o.published_at, o.attempts, o.last_error,
  o.dead_lettered_at, o.locked_by, NULLIF(o.locked_until, 'infinity') AS locked_until,
  coalesce(o.locked_until = 'infinity', false) AS held_forever, now() AS checked_at,
  /* TEMPLATE: state_o */ AS state, o./* TEMPLATE: payload */ AS payload, o.headers::text AS headers
FROM /* TEMPLATE: table */ o WHERE o./* TEMPLATE: id */ = CAST(@id::text AS /* TEMPLATE: id_type */)

-- name: Blocker :one
-- What a held event waits for (inspect): the lowest-seq earlier
-- unpublished row of its aggregate (@aggregate_id; @seq is the held
-- event's seq) that is backing off or held as a dead letter (locked_by
-- NULL, locked_until in the future or 'infinity'), the condition of
-- rowstate.States.HeldBehind. No row when it moved on after the held
-- event was read.
--
-- Columns: seq, the ID as text, its state (state_b: rowstate.States.State
-- on alias b, not p: the held-back check inside it names the table p),
-- locked_until (NULL for 'infinity'), dead_lettered_at.
SELECT b.seq, b./* TEMPLATE: id */::text AS event_id, /* TEMPLATE: state_b */ AS state, NULLIF(b.locked_until, 'infinity') AS locked_until,
  b.dead_lettered_at
FROM /* TEMPLATE: table */ b
WHERE b./* TEMPLATE: aggregate_id */ = @aggregate_id AND b.published_at IS NULL AND b.seq < @seq AND b.locked_until > now() AND b.locked_by IS NULL
ORDER BY b.seq LIMIT 1
