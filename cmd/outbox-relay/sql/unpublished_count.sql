-- The number of unpublished rows of the table (read by the partial index
-- of unpublished rows): adopt says how many rows already in the table the
-- relay will publish when it starts.
SELECT count(*) FROM /* TEMPLATE: table */ WHERE published_at IS NULL
