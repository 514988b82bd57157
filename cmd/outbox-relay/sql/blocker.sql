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
SELECT b.seq, b./* TEMPLATE: id */::text, /* TEMPLATE: state_b */, NULLIF(b.locked_until, 'infinity'), b.dead_lettered_at
FROM /* TEMPLATE: table */ b
WHERE b./* TEMPLATE: aggregate_id */ = @aggregate_id AND b.published_at IS NULL AND b.seq < @seq AND b.locked_until > now() AND b.locked_by IS NULL
ORDER BY b.seq LIMIT 1
