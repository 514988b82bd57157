-- A fragment of grant_lookups.sql: grants the role SELECT on the table's
-- seq sequence, whose last value the claim floor reads.
  EXECUTE format('GRANT SELECT ON SEQUENCE %s TO %s', pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq'), /* TEMPLATE: role_literal */);
