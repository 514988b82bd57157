-- A statement of the grants script: who owns which key partition
-- (<table>_partitions) and the generation (<table>_partitioning).
GRANT SELECT, UPDATE ON TABLE /* TEMPLATE: partitions */, /* TEMPLATE: partitioning */ TO /* TEMPLATE: role */;
