-- The claim: its plan settings, the statement that leases a batch, and
-- what a claim reads before and after it.

-- name: PlanSettings :fragment
-- A fragment, not a statement: the plan settings every statement batch
-- of a Claimer sets for its own transaction (Plan, AsyncCommit),
-- so that each hot statement stays on its index whatever the table's
-- statistics say.
--
-- pgx prepares statements, and after five executions PostgreSQL may
-- switch one to a generic plan, chosen with the statistics of that
-- moment. Planned while the table was empty (as autovacuum's ANALYZE
-- finds it between bursts), the claim becomes a sequential scan and a
-- sort of the whole table, and the mark a sequential scan
-- (relay.TestBurstAfterIdleDrainsAsFast). Forcing custom plans would
-- re-plan the claim at every execution, many times the CPU of running the
-- cached plan; disabling the plans that read the whole table keeps the
-- cached plan and makes it the index's: outbox_unpublished_seq_idx in seq
-- order for the claim and the floor, the seq index for mark, release and
-- extend.
--
-- The generic plan is also forced (plan_cache_mode): PostgreSQL would
-- otherwise keep re-planning the claim, whose estimated cost the disabled
-- nodes inflate, at every execution. On a time-partitioned table that
-- planning, over every partition, cost as much as a third of the claim's
-- execution; a mark's created_at range still prunes partitions, at
-- executor start.
--
-- JIT is off: the claim's SubPlan (and any plan the disabled nodes
-- inflate) would otherwise be compiled, some 20 ms a claim for nothing.
--
-- Bitmap scans are off: the order guard's probe (rowstate.States.Waiting)
-- stops at its first blocking row, which a bitmap scan cannot do: it reads
-- the probe's whole range, every dead index entry included, before its
-- first row (1,059,205 buffers for one claim in TestGuardProbesStartAtTheLowestUnpublishedRow
-- against 11,152 with an index scan), and every row held behind a dead
-- letter for each candidate of its aggregate.
set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: Plan :exec
-- Sets the plan settings (PlanSettings) for the rest of the
-- (implicit) transaction. A claim that registers the relay in the order
-- guard starts with this one, not AsyncCommit: it commits
-- synchronously, because relays of older versions skip their guard on the
-- strength of that registration, so a database crash must not lose it
-- while its leases survive.
SELECT /* TEMPLATE: plan_settings */

-- name: AsyncCommit :exec
-- Turns off synchronous_commit for the rest of the (implicit)
-- transaction, and sets the plan settings (PlanSettings).
--
-- Claims and marks commit without waiting for their WAL flush: they
-- become visible at once, and a database crash can only lose the last few
-- hundred milliseconds of them, which returns those rows to "unclaimed" or
-- "unpublished": they are published again, which at-least-once delivery
-- allows. It takes a WAL flush off every claim, which is on the path of
-- every event's commit-to-publish latency. The writer's transactions are
-- untouched: they commit with the application's own setting.
SELECT set_config('synchronous_commit', 'off', true), /* TEMPLATE: plan_settings */

-- name: ClaimGuardFrom :fragment
-- A fragment of Claim (the lower bound of the order guard's probes),
-- not a statement; it names Claim's CTE lo.
--
-- The guard's probes start at the lowest unpublished seq at or above the
-- floor (lo.guard: @floor, or 0 after a restart of the sequence), computed
-- once per claim (an InitPlan): no row below it is leased or backing off.
-- Every probe walks its aggregate's index entries from there, dead ones
-- included; from seq 0 (a new relay, or a rescan) each probe would walk
-- its aggregate's whole history while a long transaction keeps VACUUM
-- from removing it.
(SELECT coalesce(min(m.seq), (SELECT guard FROM lo)) FROM /* TEMPLATE: table */ m WHERE m.published_at IS NULL AND m.seq >= (SELECT guard FROM lo))

-- name: Claim :many
-- The claim: leases up to @batch_size claimable rows of the partitions
-- this relay (@member) owns, in seq order, for @lease_ms milliseconds
-- under holder @holder and claim token @token, and returns them.
--
-- One statement: a CTE (referenced twice, so materialized: evaluated
-- once) picks the candidates, and the UPDATE leases exactly those, found
-- by ctid (a TID scan, no index lookup; on a partitioned table by
-- tableoid and ctid, joined: the row_address and match_candidates slots,
-- sqlname.RowAddress). Never `UPDATE ... WHERE id IN (SELECT ... LIMIT n)`:
-- the planner may run that subquery more than once and lease more than n
-- rows (PostgreSQL bug #15715).
--
-- The candidates are not row-locked (FOR UPDATE SKIP LOCKED): no other
-- relay claims rows of this relay's partitions, its own claims are
-- serialized by Claimer.mu, and the only other writer of a claimable row
-- is the relay whose lease on it ended, settling it late; the UPDATE then
-- waits for that transaction and skips the row, whose ctid changed. A row
-- lock would be a WAL record of its own per row.
--
-- Slots: the tables (table, relays, partitions, guard), the configured
-- columns (id, aggregate_id, event_type, payload; aggregate_type_o is
-- NULL::text without that column), key_partition_o (a row's key
-- partition), and the row-state predicates of lease.States (live_o,
-- lease_free_o, waiting_o), shared with the gauges and the status
-- commands so that they never disagree.
WITH lo AS MATERIALIZED (
  -- The floor (@floor; @scan_from is where this claim scans from: the
  -- floor, or 0 for a rescan) holds only while the sequence moves forward.
  -- Normally its last value is at least the floor minus one (the floor
  -- never passes a value the sequence handed out). Below that, the
  -- sequence went back (ALTER SEQUENCE ... RESTART, a logical-replication
  -- cutover) and new rows have seqs below the floor, where only the
  -- once-a-minute rescan would find them: the claim scans, and its guard
  -- probes, from seq 0 (one InitPlan: a sequence read) until the Claimer's
  -- next advance drops its floor (Claimer.restarted). A claim from a
  -- resume point scans from the floor instead when a requeue happened
  -- since the point was set (the order guard's 'requeued' is no longer
  -- @requeued): the requeued rows lie below it (resume.go).
  SELECT CASE WHEN s.last < @floor - 1 THEN 0 WHEN @scan_from > @floor AND s.requeued <> @requeued THEN @floor ELSE @scan_from END AS scan,
    CASE WHEN s.last < @floor - 1 THEN 0 ELSE @floor END AS guard
  FROM (SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass), 0) AS last,
    coalesce((SELECT (extract(epoch FROM g.until) * 1000000)::bigint FROM /* TEMPLATE: guard */ g WHERE g.key = 'requeued'), 0) AS requeued) s
), me AS MATERIALIZED (
  -- The member must be live, and its lease on a row ends no later than its
  -- membership. A static member (@started not NULL) must also be the
  -- incarnation that started then: a later one took its row over
  -- (TakeOver).
  SELECT r.until FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.until > now()
    AND (@started::timestamptz IS NULL OR r.started_at = @started::timestamptz)
), owned AS MATERIALIZED (
  -- Ownership: @owned is a mask indexed by partition, true for the
  -- partitions this relay claims from (those it owns, less those it is
  -- giving back), as its last rebalance left them at generation
  -- @generation; @owns_any says whether any is true. The mask holds only
  -- while the generation is unchanged: every change of members or owners
  -- bumps it (Join, Move, Leave), so a relay whose partitions
  -- moved (paused past its membership, say, or a takeover that committed
  -- while it rebalanced) takes nothing, and rebalances at once (the
  -- generation read after the claim, Claimer.queueClaim). Reading one row
  -- costs a claim far less than building the mask from the partitions
  -- table; testing a row is one array subscript. With no row here (no
  -- partition owned, member not live, generation moved) the scan does not
  -- run at all.
  SELECT @owned::bool[] AS mask
  WHERE @owns_any::bool AND EXISTS (SELECT 1 FROM me)
    AND (SELECT m.generation FROM /* TEMPLATE: partitioning */ m) = @generation::bigint
), held AS MATERIALIZED (
  -- The highest seq of a held dead letter (NULL: none), read only while
  -- the guard runs, from outbox_dead_letters_idx (dead letters are few).
  SELECT max(h.seq) AS seq FROM /* TEMPLATE: table */ h
  WHERE h.dead_lettered_at IS NOT NULL AND h.published_at IS NULL AND h.locked_until = 'infinity'
), scan AS (
  -- The order guard keeps per-aggregate order across retries: a row is
  -- not claimable while an earlier unpublished row of its aggregate is
  -- backing off after a failed publish (locked_by NULL, locked_until in
  -- the future), held as a dead letter, or leased under another holder.
  -- This relay's own leases (@holder) do not block it: it publishes its
  -- batches one after the other, in seq order. The guard (waiting_o) is a
  -- scalar subquery on purpose: written as NOT EXISTS the planner turns it
  -- into an anti-join that reads the whole table once per claim; as a
  -- correlated SubPlan it is one probe of outbox_unpublished_aggregate_idx
  -- per candidate, which stops at the first blocking row. Its probes start
  -- at ClaimGuardFrom. JIT is off for the claim (PlanSettings):
  -- the SubPlan's pessimistic cost estimate would otherwise trigger JIT
  -- compilation.
  --
  -- The guard is needed only while a row could block a later event of
  -- its aggregate: a row backing off or a held dead letter ('holds' in the
  -- order guard), or a claim of this relay's whose answer was lost and
  -- that may have leased rows under an earlier holder (@force_guard).
  -- Other relays' leases cannot: they own other partitions, and a
  -- partition changes hands only once nothing of it is leased.
  --
  -- Before the probe, a row above every held dead letter whose aggregate
  -- has one is known to be held without it: one lookup in a hashed set of
  -- the held aggregates. A backlog behind a held dead letter then costs a
  -- claim that walks it one heap visit per row, not one probe.
  SELECT /* TEMPLATE: row_address_o */, o.seq, o.locked_by IS NOT NULL AS taken_over, coalesce(o.payload_size, @max_bytes) AS size
  FROM /* TEMPLATE: table */ o
  WHERE EXISTS (SELECT 1 FROM owned)
    AND /* TEMPLATE: live_o */
    AND o.seq >= (SELECT scan FROM lo)
    AND /* TEMPLATE: lease_free_o */
    AND (SELECT mask FROM owned)[/* TEMPLATE: key_partition_o */ + 1]
    AND (NOT (@force_guard::bool OR (SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: guard */ g WHERE g.key = 'holds' AND g.until > now())))
      OR (NOT coalesce(o.seq > (SELECT seq FROM held) AND o./* TEMPLATE: aggregate_id */ IN (SELECT h./* TEMPLATE: aggregate_id */ FROM /* TEMPLATE: table */ h
            WHERE h.dead_lettered_at IS NOT NULL AND h.published_at IS NULL AND h.locked_until = 'infinity'), false)
        AND NOT /* TEMPLATE: waiting_o */))
  ORDER BY o.seq
  LIMIT @batch_size
), candidates AS (
  -- The byte bound (@max_bytes, Config.MaxBatchBytes): the scan's rows
  -- are taken in seq order while the payload bytes before each stay under
  -- it, so a claim always takes its first row, whatever its size. The
  -- sizes are payload_size (migration 00010: the uncompressed size,
  -- recorded at insert), read from the heap tuple the scan visits anyway;
  -- no payload is read to size it (pg_column_size of a stored value is its
  -- compressed size, and detoasting each candidate would read every
  -- payload twice). A row without one (written before the migration, or
  -- with triggers off) counts as the whole bound: at most one such row per
  -- claim, after what fits.
  --
  -- The running sum is computed only when the scan's rows (at most
  -- @batch_size of them) come to the bound or more: a One-Time Filter on
  -- their total gates the branch with the window and its sort of those
  -- rows, so a claim of small payloads costs one aggregate over its own
  -- rows more, not a window over every row it scans.
  SELECT /* TEMPLATE: row_address */, taken_over FROM scan WHERE (SELECT sum(size) FROM scan) < @max_bytes
  UNION ALL
  SELECT /* TEMPLATE: row_address */, taken_over FROM (
    SELECT /* TEMPLATE: row_address */, taken_over, sum(size) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) - size AS before
    FROM scan WHERE (SELECT sum(size) FROM scan) >= @max_bytes
  ) w WHERE before < @max_bytes
), claimed AS (
-- A lease never outlives the membership (me.until). A payload larger than
-- the bound itself is not read at all (the CASE): its row comes back
-- without it, the Claimer sets its DecodeErr and the relay dead-letters
-- it, so that one huge row cannot take the relay past its memory bound.
UPDATE /* TEMPLATE: table */ o
SET locked_until = least(now() + @lease_ms * interval '1 millisecond', (SELECT until FROM me)), locked_by = @holder, claim_token = @token
/* TEMPLATE: match_candidates */
RETURNING o.seq, o./* TEMPLATE: id */::text AS id, o./* TEMPLATE: aggregate_id */::text AS aggregate_id, o./* TEMPLATE: event_type */::text AS event_type,
  CASE WHEN o.payload_size > @max_bytes THEN NULL ELSE o./* TEMPLATE: payload */ END AS payload,
  o.headers, o.topic, o.created_at, o.attempts, o.locked_until, /* TEMPLATE: aggregate_type_o */ AS aggregate_type,
  /* TEMPLATE: key_partition_o */ AS key_partition, (extract(epoch FROM o.locked_until - now()) * 1000)::bigint AS lease_ms, o.payload_size
)
-- The last two columns: the rows taken over (whose previous lease had
-- ended unsettled), and whether the byte bound left claimable rows behind,
-- so that the relay claims again at once as after a full batch
-- (Batch.More). The relay reads the columns by name (claimedRow).
SELECT claimed.*, (SELECT count(*) FROM candidates WHERE taken_over) AS taken_over,
  (SELECT count(*) FROM scan) > (SELECT count(*) FROM candidates) AS more
FROM claimed

-- name: WakeOwners :one
-- A shared poll (Claimer.PollShared), queued after the claim in its
-- transaction: finds the key partitions of the claimable rows among the
-- first @scan_limit live, lease-free rows in seq order, of whichever
-- relay, and notifies @channel at commit naming those not in @mine (this
-- relay's), in one payload: @named ('poll:kp:', config.PollWakePrefix
-- and KeyPartitionsPrefix) and the partitions, or 'poll:' alone (every
-- relay wakes) past @max_named of them. Their owners claim them as after
-- a writer's notification, so relays that poll in turn find every
-- relay's events. Returns how many partitions it named (0: it notified
-- nothing).
--
-- The scan starts at the table's first unpublished row, not at this
-- relay's floor: the floor is computed over this relay's partitions only,
-- and a busy relay's runs ahead of an idle relay's unpublished rows. Rows
-- held behind an earlier row of their aggregate that backs off or is held
-- as a dead letter (while any row is: 'holds' in the order guard), which
-- no owner could claim, are not counted, so a run of them shorter than
-- @scan_limit hides nothing; a longer one (a large backlog behind a dead
-- letter) leaves the rows after it to their owners' own turns. The bound
-- keeps each poll's walk, and its probes, small whatever is held.
WITH scanned AS (
  SELECT o.seq, o./* TEMPLATE: aggregate_id */, /* TEMPLATE: key_partition_o */ AS kp
  FROM /* TEMPLATE: table */ o
  WHERE /* TEMPLATE: live_o */
    AND /* TEMPLATE: lease_free_o */
  ORDER BY o.seq
  LIMIT @scan_limit
), found AS (
  SELECT DISTINCT o.kp FROM scanned o
  WHERE NOT coalesce((@mine::bool[])[o.kp + 1], false)
    AND (NOT (SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: guard */ g WHERE g.key = 'holds' AND g.until > now()))
      OR NOT /* TEMPLATE: held_behind_o */)
), woken AS (
  SELECT count(*) AS n, pg_notify(@channel,
      CASE WHEN count(*) <= @max_named THEN @named || string_agg(kp::text, ',' ORDER BY kp) ELSE @named_all END)
  FROM found HAVING count(*) > 0
)
SELECT coalesce((SELECT n FROM woken), 0)

-- name: Holds :one
-- The order guard's entries a claim's resume point depends on (resume.go),
-- queued before the claim in the claim's own transaction, so read before
-- the claim's snapshot: whether a row backs off or is held as a dead
-- letter ('holds'), whether a row backs off ('backoff'), the time of the
-- last requeue ('requeued', in microseconds since 1970; 0: none), and
-- whether a dead letter may be held ('holds' is infinity: the claim probes
-- the guard by rows, Claimer.heldSeen).
SELECT coalesce(bool_or(g.key = 'holds' AND g.until > now()), false),
  coalesce(bool_or(g.key = 'backoff' AND g.until > now()), false),
  coalesce((extract(epoch FROM max(g.until) FILTER (WHERE g.key = 'requeued')) * 1000000)::bigint, 0),
  coalesce(bool_or(g.key = 'holds' AND g.until = 'infinity'), false)
FROM /* TEMPLATE: guard */ g WHERE g.key IN ('holds', 'backoff', 'requeued')

-- name: Generation :one
-- Read after each claim: the generation (a change means another relay
-- joined, left or moved partitions) and whether a member's membership
-- ran out (its partitions are free): either makes the next claim
-- rebalance first.
SELECT m.generation, EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.until <= now()) FROM /* TEMPLATE: partitioning */ m

-- name: Partitioned :one
-- Whether the outbox table (@table, quoted and schema-qualified) is
-- partitioned (PARTITION BY), which decides how the statements that
-- update rows they selected name them (the row_address slots).
SELECT relkind = 'p' FROM pg_class WHERE oid = @table::regclass
