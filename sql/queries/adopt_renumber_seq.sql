-- Gives the rows already in the table the seqs of the order they were
-- written in (adopt_capture_order.sql), in place of the order on disk
-- that adding seq gave them: the same seqs (1..n), permuted. Only when
-- every row has an id of its own (no NULL, no repeat): otherwise the rows
-- keep the order on disk.
UPDATE /* TEMPLATE: table */ t SET seq = o.n FROM pgoutbox_adopt_order o
WHERE t.id = o.id AND t.seq <> o.n
  AND (SELECT count(*) = count(DISTINCT id) FROM pgoutbox_adopt_order)
