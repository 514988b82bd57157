-- seq GENERATED ALWAYS again (adopt_seq_by_default.sql).
ALTER TABLE /* TEMPLATE: table */ ALTER COLUMN seq SET GENERATED ALWAYS
