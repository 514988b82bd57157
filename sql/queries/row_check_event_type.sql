-- A fragment, not a statement: migration 00008's rule on the new row's
-- event type (event_type: its column, quoted), cast to text: not empty.
NEW./* TEMPLATE: event_type */::text <> ''
