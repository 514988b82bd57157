-- The event type column Adopt finds in the table @table (quoted):
-- "event_type" if it has one (it sorts first), else "type" (Debezium's);
-- NULL with neither, and Adopt then leaves out the event type's rule.
SELECT (array_agg(attname::text ORDER BY attname::text))[1] FROM pg_attribute
WHERE attrelid = @table::regclass AND attname IN ('event_type', 'type') AND attnum > 0 AND NOT attisdropped
