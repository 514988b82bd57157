-- The first statement of a partition's drop: the table's ACCESS EXCLUSIVE
-- lock (lock_table.sql) is waited for at most Config.LockTimeout (the
-- slot, in milliseconds), since producers and relays queue behind a
-- waiting lock. SET takes no parameters, so the value is in the text.
SET LOCAL lock_timeout = /* TEMPLATE: lock_timeout_ms */
