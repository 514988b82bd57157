-- Makes seq own its sequence (seq_nextval_column.sql), as a serial
-- column's: dropped with the column, and found through pg_depend
-- (seq_of.sql) like an identity's.
ALTER SEQUENCE /* TEMPLATE: sequence */ OWNED BY /* TEMPLATE: table */.seq
