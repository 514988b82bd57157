-- The status command's relays holding leases: each relay (locked_by)
-- holding unpublished rows whose lease has not ended, how many, and when
-- the last of those leases ends. A row backing off (locked_by NULL) is no
-- relay's.
SELECT locked_by, count(*), max(locked_until) FROM /* TEMPLATE: table */
WHERE published_at IS NULL AND locked_until > now() AND locked_by IS NOT NULL
GROUP BY locked_by ORDER BY locked_by
