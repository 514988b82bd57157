-- Ownership of key partitions: the relays' membership and the moves of
-- partitions between them.

-- name: Join :one
-- The heartbeat of member @member (of relay @relay_id): members whose
-- until has passed are removed (their partitions are free), this one
-- joins or renews its until to @lease_ms milliseconds from now, and a
-- join or a removal bumps the generation so that every relay rebalances
-- (at its next claim, and at once with a notification on @channel: a
-- relay woken only for its own key partitions would otherwise not claim
-- until its next poll).
-- Returns the table's number of key partitions, the generation, and
-- whether the key partitions' backfill has finished.
WITH expired AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE until <= now() AND member <> @member RETURNING member
), me AS (
  INSERT INTO /* TEMPLATE: relays */ (member, relay_id, until) VALUES (@member, @relay_id, now() + @lease_ms * interval '1 millisecond')
  ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until, renewed_at = now()
  RETURNING (xmax = 0) AS joined
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM expired) OR (SELECT joined FROM me)
  RETURNING generation
), wake AS (
  -- Every relay on @channel rebalances at once ('' : no notification).
  SELECT pg_notify(@channel, /* TEMPLATE: members_payload */) FROM bump WHERE @channel <> ''
)
SELECT m.partitions, coalesce((SELECT generation FROM bump), m.generation) AS generation, m.backfilled_at IS NOT NULL AS backfilled
FROM /* TEMPLATE: partitioning */ m WHERE (SELECT count(*) FROM wake) >= 0

-- name: Members :many
-- The live members, which Assign shares the key partitions among.
SELECT member FROM /* TEMPLATE: relays */ WHERE until > now() ORDER BY member

-- name: Owners :many
-- The owner of each key partition ('' for nobody), in partition order.
SELECT partition, coalesce(owner, '') AS owner FROM /* TEMPLATE: partitions */ ORDER BY partition

-- name: Move :one
-- Acquires for member @member the free partitions among @acquire
-- assigned to it (no owner, or an owner that is no live member), gives
-- back those of @release it owns, and bumps the generation if anything
-- changed hands (notifying @channel, as Join does). Returns the partitions acquired, those given back, and
-- the new generation (NULL when nothing moved).
WITH mine AS MATERIALIZED (
  -- A static member moves partitions only while the row is its
  -- incarnation's (@started; NULL: not static), see TakeOver.
  SELECT 1 WHERE @started::timestamptz IS NULL
    OR EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.started_at = @started::timestamptz)
), acquired AS (
  UPDATE /* TEMPLATE: partitions */ p SET owner = @member, epoch = p.epoch + 1, since = now(),
    handovers = p.handovers + CASE WHEN p.owner IS NULL THEN 0 ELSE 1 END
  WHERE p.partition = ANY(@acquire::int[]) AND EXISTS (SELECT 1 FROM mine)
    AND (p.owner IS NULL OR NOT EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.member = p.owner AND r.until > now()))
  RETURNING p.partition
), released AS (
  UPDATE /* TEMPLATE: partitions */ p SET owner = NULL, since = now()
  WHERE p.partition = ANY(@release::int[]) AND p.owner = @member AND EXISTS (SELECT 1 FROM mine)
  RETURNING p.partition
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM acquired) OR EXISTS (SELECT 1 FROM released)
  RETURNING generation
), wake AS (
  -- Every relay on @channel rebalances at once ('' : no notification).
  SELECT pg_notify(@channel, /* TEMPLATE: members_payload */) FROM bump WHERE @channel <> ''
)
SELECT coalesce((SELECT array_agg(partition) FROM acquired), '{}') AS acquired,
       coalesce((SELECT array_agg(partition) FROM released), '{}') AS released,
       (SELECT generation FROM bump) AS generation
WHERE (SELECT count(*) FROM wake) >= 0

-- name: Leave :one
-- Member @member leaves: it gives back every partition it owns but those
-- still busy (@keep), removes itself when @gone (nothing is kept), and
-- bumps the generation if either happened, notifying @channel, so that
-- the other relays take its partitions at once.
WITH mine AS MATERIALIZED (
  -- As in Move: a static member leaves only while the row is its own.
  SELECT 1 WHERE @started::timestamptz IS NULL
    OR EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.started_at = @started::timestamptz)
), released AS (
  UPDATE /* TEMPLATE: partitions */ SET owner = NULL, since = now()
  WHERE owner = @member AND NOT (partition = ANY(@keep::int[])) AND EXISTS (SELECT 1 FROM mine) RETURNING partition
), gone AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE member = @member AND @gone AND EXISTS (SELECT 1 FROM mine) RETURNING member
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM released) OR EXISTS (SELECT 1 FROM gone)
  RETURNING generation
)
SELECT pg_notify(@channel, /* TEMPLATE: members_payload */) FROM bump WHERE @channel <> ''

-- name: LockMember :exec
-- Static membership (lease.Config.RelayID set: the member is the relay ID,
-- the same in every incarnation). A takeover's first statement: waits at
-- most @timeout_ms for the claims and extensions of earlier incarnations
-- of member @key in progress (each holds this lock shared,
-- MemberShared) and keeps any new one waiting until the takeover commits,
-- so that the takeover's next statement sees every lease they gave.
-- Only while the member's row @member is live: once its until has
-- passed, no lease an earlier incarnation gave or gives (claims and
-- extensions lease until then at the latest) is still running, and a
-- process paused in the middle of sending a claim, which holds the lock,
-- cannot keep the takeover waiting any longer.
SELECT set_config('lock_timeout', (@timeout_ms::bigint)::text, true), pg_advisory_xact_lock(hashtextextended(@key::text, 0))
FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.until > now()

-- name: MemberShared :exec
-- Queued first in every claim and extension of a static member (key @key):
-- a takeover (LockMember) waits for it, and it for a takeover.
SELECT pg_advisory_xact_lock_shared(hashtextextended(@key::text, 0))

-- name: TakeOver :one
-- The first join of a static member @member (incarnation @incarnation,
-- its holder before any suffix), after LockMember: it replaces the row of
-- an earlier incarnation of the same relay ID at once, and so owns its
-- partitions (owners are members, and the member name is the relay ID),
-- instead of waiting for that row's until to pass. An earlier
-- incarnation's claims and extensions check the row's started_at, which
-- changes here, so from now on they take and extend nothing.
--
-- The rows the earlier incarnations leased (locked_by @member/<8 hex>,
-- with a ".n" suffix after failed claims) stay theirs: such an incarnation
-- may be paused in the middle of publishing them. Only when an incarnation
-- declared a presence ('presence:<incarnation>' in the order guard: a
-- session of its own holds an advisory lock for as long as the process
-- lives) and nobody holds that lock any more (its process is gone: the
-- server ended its session) are its leases ended here, with their holder
-- and claim token, so that whatever it sent late changes nothing. Returns,
-- besides Join's columns, this incarnation's started_at, in how many
-- milliseconds the leases kept end at the latest (NULL: none; the claims
-- run their order guard until then) and how many leases were ended.
WITH expired AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE until <= now() AND member <> @member RETURNING member
), incs AS (
  SELECT substr(g.key, 10) AS inc,
    pg_try_advisory_xact_lock(hashtextextended('pgoutbox presence ' || @table_key::text || ' ' || substr(g.key, 10), 0)) AS gone
  FROM /* TEMPLATE: guard */ g
  WHERE g.key LIKE 'presence:%' AND g.until > now() AND substr(g.key, 10) <> @incarnation
    AND left(substr(g.key, 10), length(@member) + 1) = @member || '/'
), held AS (
  SELECT /* TEMPLATE: row_address_o */, regexp_replace(o.locked_by, '\.[0-9]+$', '') AS inc, o.locked_until
  FROM /* TEMPLATE: table */ o
  WHERE o.published_at IS NULL AND o.locked_until > now() AND o.locked_by IS NOT NULL
    AND left(o.locked_by, length(@member) + 1) = @member || '/'
    AND substr(o.locked_by, length(@member) + 2) ~ '^[0-9a-f]{8}(\.[0-9]+)?$'
    AND regexp_replace(o.locked_by, '\.[0-9]+$', '') <> @incarnation
), gone AS (
  SELECT inc FROM incs WHERE gone
), ended AS (
  UPDATE /* TEMPLATE: table */ o SET locked_until = NULL, locked_by = NULL, claim_token = NULL
  /* TEMPLATE: match_held */
    AND regexp_replace(o.locked_by, '\.[0-9]+$', '') IN (SELECT inc FROM gone)
  RETURNING 1
), undeclared AS (
  DELETE FROM /* TEMPLATE: guard */ g WHERE g.key IN (SELECT 'presence:' || inc FROM gone) RETURNING 1
), me AS (
  INSERT INTO /* TEMPLATE: relays */ (member, relay_id, until) VALUES (@member, @relay_id, now() + @lease_ms * interval '1 millisecond')
  ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until, renewed_at = now(), started_at = now()
  RETURNING started_at
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1 RETURNING generation
), wake AS (
  -- Every relay on @channel rebalances at once ('' : no notification).
  SELECT pg_notify(@channel, /* TEMPLATE: members_payload */) FROM bump WHERE @channel <> ''
)
SELECT m.partitions, (SELECT generation FROM bump) AS generation, m.backfilled_at IS NOT NULL AS backfilled,
  (SELECT started_at FROM me) AS started_at,
  (SELECT (extract(epoch FROM max(h.locked_until) - now()) * 1000)::bigint FROM held h WHERE h.inc NOT IN (SELECT inc FROM gone)) AS blocked_ms,
  (SELECT count(*) FROM ended) AS ended
FROM /* TEMPLATE: partitioning */ m WHERE (SELECT count(*) FROM wake) >= 0

-- name: Rejoin :one
-- The heartbeat of static member @member, incarnation started at
-- @started: as Join, but it renews the row only while it is this
-- incarnation's; a row of a later incarnation (a takeover, TakeOver) is
-- left alone and no row comes back (replaced_by names its holder's relay
-- ID and start). A row that is gone (its until passed) is inserted again
-- with a new started_at.
WITH expired AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE until <= now() AND member <> @member RETURNING member
), me AS (
  INSERT INTO /* TEMPLATE: relays */ (member, relay_id, until) VALUES (@member, @relay_id, now() + @lease_ms * interval '1 millisecond')
  ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until, renewed_at = now()
  WHERE /* TEMPLATE: relays */.started_at = @started::timestamptz
  RETURNING (xmax = 0) AS joined, started_at
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM expired) OR (SELECT joined FROM me)
  RETURNING generation
), wake AS (
  -- Every relay on @channel rebalances at once ('' : no notification).
  SELECT pg_notify(@channel, /* TEMPLATE: members_payload */) FROM bump WHERE @channel <> ''
)
SELECT m.partitions, coalesce((SELECT generation FROM bump), m.generation) AS generation, m.backfilled_at IS NOT NULL AS backfilled,
  (SELECT started_at FROM me) AS started_at
FROM /* TEMPLATE: partitioning */ m WHERE (SELECT count(*) FROM wake) >= 0
