-- +goose Up
-- An event that Kafka refused for good (for example MESSAGE_TOO_LARGE), or
-- that failed --max-attempts times, is dead-lettered: it stays in the table
-- with its attempts and last_error, dead_lettered_at is set, and it is not
-- claimed again until `outbox-relay requeue` clears it. With the relay's
-- --on-dead-letter=hold (the default) its locked_until is 'infinity', which
-- also holds back the later events of its aggregate (the claim's order
-- guard); with skip it is NULL and they go on.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS dead_lettered_at timestamptz;

-- Dead letters are few; this keeps counting and listing them cheap.
CREATE INDEX IF NOT EXISTS outbox_dead_letters_idx
    ON outbox (seq) WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL;

-- +goose Down
DROP INDEX IF EXISTS outbox_dead_letters_idx;
ALTER TABLE outbox DROP COLUMN IF EXISTS dead_lettered_at;
