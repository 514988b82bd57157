-- One row of <table>_partitions per key partition, owned by nobody, for
-- the partition count <table>_partitioning holds (an earlier adopt may
-- have chosen it).
INSERT INTO /* TEMPLATE: partitions */ (partition) SELECT generate_series(0, (SELECT partitions FROM /* TEMPLATE: partitioning */) - 1) ON CONFLICT DO NOTHING
