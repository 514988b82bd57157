-- Migration 00001's index of unpublished rows in seq order, for an
-- adopted table (index: <table>_unpublished_seq_idx): claim order, the
-- lowest seq among unpublished rows. Published rows leave it, so kept
-- published rows cost the claim nothing.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (seq) WHERE published_at IS NULL
