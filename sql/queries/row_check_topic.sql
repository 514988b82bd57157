-- A fragment, not a statement: migration 00008's rule on topic: SQL NULL,
-- or a legal Kafka topic name (1 to 249 characters of a-z A-Z 0-9 . _ -,
-- not "." or ".."). One line: it goes into the trigger function's body,
-- which must stay the migration's.
NEW.topic IS NULL OR (NEW.topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(NEW.topic) <= 249 AND NEW.topic NOT IN ('.', '..'))
