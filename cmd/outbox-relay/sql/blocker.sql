-- What a held event waits for (inspect): the lowest-seq earlier
-- unpublished row of its aggregate (@aggregate_id; @seq is the held
-- event's seq) whose locked_until is in the future, the condition of
-- lease.States.Waiting: leased, backing off, or a dead letter held with
-- locked_until 'infinity'. No row when it moved on after the held event
-- was read.
--
-- Columns: seq, the ID as text, its state (state_b: lease.States.State on
-- alias b, not p: the held-back check inside it names the table p),
-- locked_until (NULL for 'infinity'), dead_lettered_at.
--
-- Written here rather than taken from lease.States.Blocker, whose $1 and
-- $2 cannot be named arguments; the conditions are Blocker's.
SELECT b.seq, b./* TEMPLATE: id */::text, /* TEMPLATE: state_b */, NULLIF(b.locked_until, 'infinity'), b.dead_lettered_at
FROM /* TEMPLATE: table */ b
WHERE b./* TEMPLATE: aggregate_id */ = @aggregate_id AND b.published_at IS NULL AND b.seq < @seq AND b.locked_until > now()
ORDER BY b.seq LIMIT 1
