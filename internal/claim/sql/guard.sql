-- The order guard's rows: the relay holders' registrations and the
-- 'holds' row, and the floor's reads of the sequence.

-- name: Beat :exec
-- Registers a holder of this relay in the order guard: in a claim's own
-- transaction, a time by which all its leases will have ended. Other
-- relays' claims read it to know whether they need the order guard.
--
-- It writes now() + 3 leases, and the Claimer writes again in the first
-- claim after half a lease has passed (by the monotonic clock), so every
-- lease of a claim in between, which ends at most half a lease plus that
-- claim's own duration later, is covered with more than a lease to spare,
-- without an extra write per claim.
INSERT INTO /* TEMPLATE: guard */ (key, until)
VALUES ('relay:' || @holder, now() + 3 * @lease_ms * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until

-- name: Hold :exec
-- Extends the order guard's 'holds' entry, by the database clock: a
-- release with a delay (@delay_ms milliseconds) or a held dead letter
-- (@delay_ms NULL: forever). While 'holds' lies in the future, claims run
-- their order guard (Claim). A delay also extends 'backoff': while it lies
-- in the future, a row may turn claimable by itself when its delay ends,
-- so claims do not resume past held rows (resume.go).
INSERT INTO /* TEMPLATE: guard */ (key, until)
SELECT v.key, v.until FROM (VALUES
  ('holds', CASE WHEN @delay_ms::bigint IS NULL THEN 'infinity'::timestamptz ELSE now() + @delay_ms * interval '1 millisecond' END),
  ('backoff', now() + @delay_ms * interval '1 millisecond')) v (key, until)
WHERE v.until IS NOT NULL
ON CONFLICT (key) DO UPDATE SET until = greatest(/* TEMPLATE: guard */.until, EXCLUDED.until)

-- name: HoldsReset :exec
-- After a requeue, shrinks the order guard's 'holds' entry to what still
-- backs off or is held: the latest locked_until of an unpublished row
-- that no relay leases; 'backoff' likewise to what still backs off; and
-- sets 'requeued' to the time of the requeue, which makes every relay's
-- next claim scan from its floor (resume.go), where the requeued rows are.
WITH unleased AS (
  SELECT locked_until FROM /* TEMPLATE: table */
  WHERE published_at IS NULL AND locked_by IS NULL AND locked_until > now()
), holds AS (
  UPDATE /* TEMPLATE: guard */ SET until = CASE key
      WHEN 'holds' THEN coalesce((SELECT max(locked_until) FROM unleased), '-infinity')
      ELSE coalesce((SELECT max(locked_until) FROM unleased WHERE locked_until < 'infinity'), '-infinity') END
  WHERE key IN ('holds', 'backoff')
)
INSERT INTO /* TEMPLATE: guard */ (key, until) VALUES ('requeued', clock_timestamp())
ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until

-- name: Sweep :exec
-- Removes the order-guard registrations of relays long gone (Beat).
-- A claim sends it as rarely as it registers its own.
DELETE FROM /* TEMPLATE: guard */ WHERE (key LIKE 'relay:%' OR key LIKE 'presence:%') AND until < now() - interval '1 hour'

-- name: Declare :exec
-- A static member's presence (TakeOver): while its session holding the
-- advisory lock of incarnation @incarnation lives, a later incarnation
-- keeps its leases; once nobody holds the lock, the later one ends them.
-- Written with each Beat, for as long as the Beat's entry.
INSERT INTO /* TEMPLATE: guard */ (key, until)
VALUES ('presence:' || @incarnation, now() + 3 * @lease_ms * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until

-- name: Undeclare :exec
-- Removes a presence (Declare): its session was lost, or the relay leaves.
DELETE FROM /* TEMPLATE: guard */ WHERE key = 'presence:' || @incarnation

-- name: Unregister :exec
-- On Claimer.Close: removes the holder's order-guard registration
-- (Beat), unless rows it leased are still leased, which relays of
-- older versions must go on respecting.
DELETE FROM /* TEMPLATE: guard */ WHERE key = 'relay:' || @holder
AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: table */ WHERE locked_by = @holder AND published_at IS NULL AND locked_until > now())

-- name: Legacy :one
-- A relay of an older version, without key partitions, that holds leases
-- on the table: its holder, or '' when there is none. Such a relay
-- registers its holders in the order guard as 'relay:<holder>' too, but
-- is no member.
SELECT coalesce((SELECT substr(g.key, 7) FROM /* TEMPLATE: guard */ g
  WHERE g.key LIKE 'relay:%' AND g.until > now()
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE g.key = 'relay:' || r.member OR g.key LIKE 'relay:' || r.member || '.%'
      OR left(g.key, length(r.member) + 7) = 'relay:' || r.member || '/')
    AND EXISTS (SELECT 1 FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL AND o.locked_by = substr(g.key, 7) AND o.locked_until > now())
  LIMIT 1), '')

-- name: Advance :one
-- The lowest unpublished row at or above the floor (@floor), read after
-- AdvanceSeq and AdvanceVXID: the floor never passes it.
--
-- It counts only in the partitions this relay owns (@owned_mask, indexed
-- by key partition; NULL: every row), the ones its claims take: with
-- several relays, another relay's backlog would otherwise hold this
-- relay's floor back, and each of its claims would walk every row the two
-- relays published since (their index entries stay until VACUUM) and
-- every row of the other's partitions. The floor drops when the relay
-- acquires partitions (Claimer.rebalance).
SELECT (SELECT min(o.seq) FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL AND o.seq >= @floor
  AND (@owned_mask::bool[] IS NULL OR coalesce((@owned_mask::bool[])[/* TEMPLATE: key_partition_o */ + 1], true)))

-- name: AdvanceSeq :one
-- The floor (Claimer.advance) is a seq below which every row is
-- published; claims scan from there. Published rows leave the partial
-- indexes only when VACUUM cleans them (a large table's autovacuum may
-- skip index cleanup for a long time: PG 14+'s INDEX_CLEANUP auto bypass;
-- a transaction holding an old snapshot stops it altogether), so an index
-- scan from the start would walk over every published row's dead entry,
-- and each claim would get slower as events are published.
--
-- The floor moves only over published rows and over seqs that are final:
-- a marker records the sequence's last value (this statement) and then
-- the transactions holding a lock on the sequence (AdvanceVXID), and
-- counts once they have all ended. The sequence's cache size comes along:
-- with CACHE > 1 a session hands out values it cached in earlier
-- transactions without taking the lock again, and the floor stays at 0.
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass), 0),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass)

-- name: AdvanceVXID :one
-- The transactions holding a lock on the outbox's sequence, for a floor
-- marker (AdvanceSeq), read after the sequence's last value.
--
-- A transaction that calls nextval on a sequence takes a RowExclusiveLock
-- on it and keeps it until it ends (src/backend/commands/sequence.c,
-- lock_and_open_sequence: "owned by the top transaction"), before it takes
-- a value, so every transaction that may still commit a row with a seq at
-- or below the marker's is among them: a COPY buffering rows it has taken
-- seqs for, an INSERT with a slow expression after its nextval, a
-- transaction PREPAREd after it (prepared transactions keep their locks;
-- pg_locks shows them without a pid). A transaction that took no seq (an
-- idle session holding a REPEATABLE READ snapshot, a long report) does
-- not hold the floor back.
SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}')
FROM pg_locks l
WHERE l.locktype = 'relation' AND l.relation = pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
