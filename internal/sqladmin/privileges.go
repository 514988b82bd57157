package sqladmin

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The relay needs no more than this on its table (docs/database.md): a
// role without one of these privileges fails one step of the relay, and
// the failing statement names only the first privilege missing: the
// check names them all at once.

// Needs says which of the relay's optional duties a privilege check
// covers, besides claiming, publishing and marking (always covered).
type Needs struct {
	// Retention: the cleaner deletes published rows (DELETE on the table).
	Retention bool
	// SnapshotWatch: the held-snapshot watch reads every role's sessions in
	// pg_stat_activity, which hides other roles' transactions from a role
	// without the privileges of pg_read_all_stats.
	SnapshotWatch bool
	// TimePartitions: the relay creates a time-partitioned table's coming
	// partitions (EnsureTimePartitions) or, with retention's
	// DropPartitions, drops its old ones. Both need the table's owner role
	// (ATTACH PARTITION and DROP TABLE are the owner's) and CREATE on its
	// schema. Checked only on a partitioned table.
	TimePartitions bool
}

// Privilege is one privilege the relay's role lacks.
type Privilege struct {
	// Privilege is the SQL privilege ("UPDATE"), or "MEMBER" for a role
	// membership.
	Privilege string
	// On is the object: "TABLE outbox", "SEQUENCE outbox_seq_seq", "ROLE
	// pg_read_all_stats".
	On string
	// For says what fails without it.
	For string
}

// String is "UPDATE on TABLE outbox (claims and marks)".
func (p Privilege) String() string {
	if p.Privilege == "MEMBER" {
		return "membership in " + p.On + " (" + p.For + ")"
	}
	return p.Privilege + " on " + p.On + " (" + p.For + ")"
}

// MissingPrivileges returns the privileges the current role lacks to relay
// table with needs, in one statement of catalog functions
// (has_table_privilege, has_sequence_privilege, pg_has_role): SELECT and
// UPDATE on the table (claims, marks), SELECT, INSERT, UPDATE and DELETE on
// its order-guard table and on <table>_relays, SELECT and UPDATE on
// <table>_partitions and <table>_partitioning (ownership of key
// partitions), SELECT on its seq sequence (the claim floor reads its last
// value), and with needs DELETE on the table and membership in
// pg_read_all_stats. It returns the role's name too. An object that does
// not exist is not reported (the relay's start-up check names a missing
// table). Errors are wrapped as "check privileges: ...".
func MissingPrivileges(ctx context.Context, q Querier, table string, needs Needs) (role string, missing []Privilege, err error) {
	t := sqlname.Quote(table)
	guard := sqlname.OrderGuard(table)
	meta, relays, parts := sqlname.Beside(table, "_partitioning"), sqlname.Beside(table, "_relays"), sqlname.Beside(table, "_partitions")
	h, err := queryOne[held](ctx, q, privilegesStmt.SQL, privilegesStmt.Args(privilegeArgs{t, guard, meta, relays, parts})...)
	if err != nil {
		return "", nil, fmt.Errorf("check privileges: %w", err)
	}
	role = h.Role
	lack := func(have *bool, priv, on, why string) {
		if have != nil && !*have {
			missing = append(missing, Privilege{Privilege: priv, On: on, For: why})
		}
	}
	tn, gn := "TABLE "+sqlname.Readable(table), "TABLE "+besideReadable(table, "_order_guard")
	lack(h.TableSelect, "SELECT", tn, "claims, and the start-up check of the table")
	lack(h.TableUpdate, "UPDATE", tn, "claims and marks")
	if needs.Retention {
		lack(h.TableDelete, "DELETE", tn, "retention deletes published rows")
	}
	lack(h.GuardSelect, "SELECT", gn, "the claims' order guard")
	lack(h.GuardInsert, "INSERT", gn, "the claims' order guard")
	lack(h.GuardUpdate, "UPDATE", gn, "the claims' order guard")
	lack(h.GuardDelete, "DELETE", gn, "the claims' order guard sweep")
	mn, rn, pn := "TABLE "+besideReadable(table, "_partitioning"), "TABLE "+besideReadable(table, "_relays"), "TABLE "+besideReadable(table, "_partitions")
	lack(h.PartitioningSelect, "SELECT", mn, "the start-up check and every rebalance of key partitions")
	lack(h.PartitioningUpdate, "UPDATE", mn, "rebalances of key partitions")
	for _, pr := range []struct {
		have *bool
		priv string
	}{{h.RelaysSelect, "SELECT"}, {h.RelaysInsert, "INSERT"}, {h.RelaysUpdate, "UPDATE"}, {h.RelaysDelete, "DELETE"}} {
		lack(pr.have, pr.priv, rn, "the relay's membership heartbeat")
	}
	lack(h.PartitionsSelect, "SELECT", pn, "claims (which partitions the relay owns)")
	lack(h.PartitionsUpdate, "UPDATE", pn, "acquiring and handing over key partitions")
	if h.Sequence != nil {
		lack(h.SequenceSelect, "SELECT", "SEQUENCE "+*h.Sequence, "the claims that advance their floor read its last value, and fail without it")
	}
	if needs.TimePartitions && h.Owner != nil {
		lack(h.OwnerMember, "MEMBER", "ROLE "+*h.Owner, "the table's owner: creating its time partitions and dropping old ones (ATTACH PARTITION, DROP TABLE)")
		lack(h.SchemaCreate, "CREATE", "SCHEMA of "+sqlname.Readable(table), "creating its time partitions")
	}
	if needs.SnapshotWatch {
		lack(h.ReadAllStats, "MEMBER", "ROLE pg_read_all_stats", "the held-snapshot watch cannot see other roles' transactions in pg_stat_activity")
	}
	return role, missing, nil
}

// besideReadable is sqlname.Beside's name of suffix beside table, as a
// person would type it.
func besideReadable(table, suffix string) string {
	q := sqlname.Beside(table, suffix)
	var parts []string
	for _, p := range strings.Split(q, ".") {
		parts = append(parts, strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(p, `"`), `"`), `""`, `"`))
	}
	return sqlname.Readable(strings.Join(parts, "."))
}

// held is the row of MissingPrivileges: the role, and whether it holds
// each privilege (NULL for an object that does not exist, and for the
// owner's and the schema's on a plain table).
type held struct {
	Role               string  `db:"role"`
	TableSelect        *bool   `db:"table_select"`
	TableUpdate        *bool   `db:"table_update"`
	TableDelete        *bool   `db:"table_delete"`
	GuardSelect        *bool   `db:"guard_select"`
	GuardInsert        *bool   `db:"guard_insert"`
	GuardUpdate        *bool   `db:"guard_update"`
	GuardDelete        *bool   `db:"guard_delete"`
	Sequence           *string `db:"sequence"`
	SequenceSelect     *bool   `db:"sequence_select"`
	ReadAllStats       *bool   `db:"read_all_stats"`
	PartitioningSelect *bool   `db:"partitioning_select"`
	PartitioningUpdate *bool   `db:"partitioning_update"`
	RelaysSelect       *bool   `db:"relays_select"`
	RelaysInsert       *bool   `db:"relays_insert"`
	RelaysUpdate       *bool   `db:"relays_update"`
	RelaysDelete       *bool   `db:"relays_delete"`
	PartitionsSelect   *bool   `db:"partitions_select"`
	PartitionsUpdate   *bool   `db:"partitions_update"`
	OwnerMember        *bool   `db:"owner_member"`
	SchemaCreate       *bool   `db:"schema_create"`
	Owner              *string `db:"owner"`
}
