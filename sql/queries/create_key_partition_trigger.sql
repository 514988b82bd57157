-- The insert trigger of an adopted table (migration 00009's
-- <table>_key_partition_fill): it runs set_key_partition_fn on each new
-- row, whatever writes it, to fill in key_partition and payload_size.
-- There is no BEFORE UPDATE trigger: it would lock every row the relay
-- updates (see migration 00008).
CREATE TRIGGER /* TEMPLATE: trigger */ BEFORE INSERT ON /* TEMPLATE: table */ FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: set_key_partition_fn */()
