package sql

import "github.com/pgoutbox/outbox/internal/sqladmin"

// UnloggedError says that the outbox table, one of its partitions, or
// its seq sequence is UNLOGGED: PostgreSQL empties an unlogged table after
// a crash or an immediate shutdown and does not replicate it. Migrate,
// Adopt and relay.Service.Run refuse such a table with it. Its fields:
// Table (as given), Sequence (the unlogged sequence, "" when it is the
// table) and Partition (the unlogged partition, if that is what is); its
// message names the ALTER ... SET LOGGED that fixes it.
type UnloggedError = sqladmin.UnloggedError

// ReplicaIdentityError says that publications publish the UPDATEs (or
// DELETEs) of the outbox table while it has no usable replica identity,
// so PostgreSQL refuses every claim and mark of the relay (SQLSTATE
// 55000). Adopt and relay.Service.Run refuse such a table with it. Its
// fields: Table, Publications (those at fault) and Updates (false when
// only DELETEs fail); its message names the fixes.
type ReplicaIdentityError = sqladmin.ReplicaIdentityError

// Needs says which of the relay's optional duties its start-up privilege
// check covers, besides claiming, publishing and marking (always
// covered): Retention (DELETE on the table), SnapshotWatch (membership in
// pg_read_all_stats) and TimePartitions (the table's owner role and
// CREATE on its schema, on a partitioned table). It is the type of
// relay.ServiceConfig.Privileges; GrantScript grants them all.
type Needs = sqladmin.Needs
