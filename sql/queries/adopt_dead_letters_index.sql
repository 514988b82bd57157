-- Migration 00002's index of dead letters, for an adopted table (index:
-- <table>_dead_letters_idx): dead letters are few; it keeps counting and
-- listing them cheap.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (seq) WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL
