// Package sqlname is the one place that turns the outbox table's name
// into SQL: identifier quoting, the names of the tables beside it, and the
// advisory-lock keys that serialize work on it. The writer, the claimer,
// the gauges, the retention cleaner and adopt all use it, so a table name
// with a schema, a dot or a quote is handled the same way everywhere.
package sqlname

import (
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Quote quotes a table name that may be schema-qualified ("app.outbox"
// becomes "app"."outbox") for use in SQL text.
func Quote(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

// Column quotes one column name.
func Column(name string) string { return pgx.Identifier{name}.Sanitize() }

// Literal returns s as a SQL string literal.
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// OrderGuard returns the quoted name of table's order-guard table:
// <table>_order_guard, in the same schema (migration 00005), named as
// Beside names: a table name too long for it gets a hash instead of being
// cut by the server (a 63-byte name cut so would be the table's own, and
// two long names sharing their first 51 bytes would share one guard).
func OrderGuard(table string) string { return Beside(table, "_order_guard") }

// Sibling returns the quoted name of an object beside table, in the same
// schema: table's own name followed by suffix ("app.outbox", "_x" gives
// "app"."outbox_x"). Names over PostgreSQL's 63 bytes are truncated by the
// server, the same way wherever they are used.
func Sibling(table, suffix string) string {
	parts := strings.Split(table, ".")
	parts[len(parts)-1] += suffix
	return pgx.Identifier(parts).Sanitize()
}

// Beside returns the quoted name of an object beside table, in the same
// schema, like Sibling, for the objects of key partitions (migration
// 00009: <table>_partitioning, _relays, _partitions, _key_partition,
// _set_key_partition): when table's own name and suffix would pass
// PostgreSQL's 63 bytes, the name is cut at a character boundary and an
// 8-digit hash of the whole name keeps names of different tables (and
// different suffixes, which the cut would drop) apart. Short names are
// Sibling's.
func Beside(table, suffix string) string {
	parts := strings.Split(table, ".")
	parts[len(parts)-1] = BesideName(parts[len(parts)-1], suffix)
	return pgx.Identifier(parts).Sanitize()
}

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN - 1.
const maxIdentifierBytes = 63

// BesideName is Beside's name for an object named after the table's own
// name base (no schema), unquoted: base+suffix when it fits in 63 bytes,
// else cut with a hash of the whole. For names that cannot be qualified
// (an index's in CREATE INDEX).
func BesideName(base, suffix string) string {
	name := base + suffix
	if len(name) <= maxIdentifierBytes {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	tag := fmt.Sprintf("_%08x", h.Sum32())
	keep := maxIdentifierBytes - len(tag) - len(suffix)
	for keep > 0 && !utf8.RuneStart(base[keep]) {
		keep--
	}
	return base[:keep] + tag + suffix
}

// Advisory-lock classes: the first key of the two-key
// pg_advisory_xact_lock(int, int); the second is the table's OID, so each
// table has its own locks.
const (
	// LockClaim serializes the claims of every relay on one table (see
	// claim.Claimer: two concurrent claims could split an aggregate's
	// consecutive events between two relays).
	LockClaim = 1869574000
	// LockAdopt serializes adopt on one table.
	LockAdopt = 1869574001
	// LockTimePartitions serializes the creation and the dropping of one
	// table's time partitions (sql.CreateTimePartitions, package
	// retention), so that several relays keeping them do not collide.
	LockTimePartitions = 1869574002
)

// XactLock returns the SQL expression that takes the transaction-level
// advisory lock of class on table.
func XactLock(class int, table string) string {
	return "pg_advisory_xact_lock(" + itoa(class) + ", " + Literal(Quote(table)) + "::regclass::oid::int)"
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Readable returns table as a person would type it in SQL: unquoted when
// each part is a plain lower-case identifier ("billing.outbox"), quoted
// like Quote otherwise ("Billing"."Out box"). For messages that give a
// statement to run.
func Readable(table string) string {
	for _, p := range strings.Split(table, ".") {
		if !plain(p) {
			return Quote(table)
		}
	}
	return table
}

func plain(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '$')) {
			return false
		}
	}
	return true
}

// RowAddress writes how a statement that first selects outbox rows in a
// CTE and then updates exactly those rows names them. On a plain table a
// row's ctid is unique, and the UPDATE takes the rows by a TID scan of
// ctid = ANY(...) (internal/claim/sql: Claim and Mark say why
// the statements are shaped so). On a partitioned table a ctid is only unique within one partition:
// the same ctid names a row in every partition that has that page. There
// a row is named by (tableoid, ctid), and the UPDATE joins the CTE on them
// and on created_at and the event ID: created_at, the partition key, lets
// the executor prune every partition but the row's own for each joined row
// (run-time partition pruning), and with the event ID the only index path
// the planner can take instead of the parameterized TID scan is a lookup
// of one row in the primary key (id, created_at) that migrate
// --time-partitioned creates. Without them each row would be looked for in
// every partition, and a generic plan made while a partition was empty
// could scan that partition's whole primary key for every row once it has
// filled.
type RowAddress struct {
	partitioned bool
	table       string // quoted table
	id          string // quoted event ID column
}

// NewRowAddress returns the RowAddress of table (optionally
// schema-qualified), partitioned or not, whose event ID column is idColumn
// ("" means "id").
func NewRowAddress(table, idColumn string, partitioned bool) RowAddress {
	if idColumn == "" {
		idColumn = "id"
	}
	return RowAddress{partitioned: partitioned, table: Quote(table), id: Column(idColumn)}
}

// Partitioned reports whether r is the address of a partitioned table.
func (r RowAddress) Partitioned() bool { return r.partitioned }

// Select returns what the CTE selects from the table as alias a ("": the
// table unaliased) to name its rows: "a.ctid", or on a partitioned table
// "a.ctid, a.tableoid, a.created_at, a.<id>".
func (r RowAddress) Select(a string) string {
	q := ""
	if a != "" {
		q = a + "."
	}
	if !r.partitioned {
		return q + "ctid"
	}
	return q + "ctid, " + q + "tableoid, " + q + "created_at, " + q + r.id
}

// Match returns the end of an UPDATE of the table as alias a ("": the
// table unaliased), after its SET list, that updates exactly the rows the
// CTE cte selected with Select: "\nWHERE a.ctid = ANY(ARRAY(SELECT ctid
// FROM cte))", or on a partitioned table "\nFROM cte addr WHERE a.ctid =
// addr.ctid AND ..." (the CTE is joined as addr, which the SET list must
// not use as a name). A further condition may follow with AND.
func (r RowAddress) Match(a, cte string) string {
	if !r.partitioned {
		if a != "" {
			a += "."
		}
		return "\nWHERE " + a + "ctid = ANY(ARRAY(SELECT ctid FROM " + cte + "))"
	}
	if a == "" {
		a = r.table
	}
	return "\nFROM " + cte + " addr WHERE " + a + ".ctid = addr.ctid AND " + a + ".tableoid = addr.tableoid AND " +
		a + ".created_at = addr.created_at AND " + a + "." + r.id + " = addr." + r.id
}
