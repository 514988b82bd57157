-- A fragment, not a statement: migration 00008's rule on headers: SQL
-- NULL, or a JSON object of strings with no empty or reserved name
-- (event_id, event_type, aggregate_id). One line: it goes into the
-- trigger function's body, which must stay the migration's.
NEW.headers IS NULL OR (jsonb_typeof(NEW.headers) = 'object' AND NOT jsonb_path_exists(NEW.headers, 'strict $.* ? (@.type() != "string")') AND NOT (NEW.headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))
