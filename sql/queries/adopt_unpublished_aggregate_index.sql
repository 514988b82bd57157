-- Migration 00001's index of unpublished rows by aggregate, for an
-- adopted table (index: <table>_unpublished_aggregate_idx; aggregate: the
-- aggregate ID column): the claim's per-aggregate order guard ("is an
-- earlier event of this aggregate still leased or backing off?") is one
-- probe of it per candidate row. Creating it fails (SQLSTATE 54000) if an
-- existing aggregate ID is too long for a B-tree entry (about 2,700
-- bytes).
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (/* TEMPLATE: aggregate */, seq) WHERE published_at IS NULL
