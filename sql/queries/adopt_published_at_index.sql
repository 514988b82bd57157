-- Migration 00004's index of published rows by publication time, for an
-- adopted table (index: <table>_published_at_idx), which retention reads.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (published_at) WHERE published_at IS NOT NULL
