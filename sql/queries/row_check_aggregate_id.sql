-- A fragment, not a statement: migration 00008's rule on the new row's
-- aggregate ID (aggregate: its column, quoted), cast to text so that it
-- applies to varchar and other columns, as the relay reads them: not
-- empty, at most max_bytes (outbox.MaxAggregateIDBytes) bytes as
-- octet_length counts them. One line: it goes into the trigger function's
-- body, which must stay the migration's.
NEW./* TEMPLATE: aggregate */::text <> '' AND octet_length(NEW./* TEMPLATE: aggregate */::text) <= /* TEMPLATE: max_bytes */
