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
// <table>_order_guard, in the same schema (migration 00005).
func OrderGuard(table string) string { return Sibling(table, "_order_guard") }

// RowCheckFunction returns the quoted name of the trigger function that
// checks table's new rows: <table>_check_row, in the same schema
// (migration 00008).
func RowCheckFunction(table string) string { return Sibling(table, "_check_row") }

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
	parts[len(parts)-1] = besideName(parts[len(parts)-1], suffix)
	return pgx.Identifier(parts).Sanitize()
}

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN - 1.
const maxIdentifierBytes = 63

func besideName(base, suffix string) string {
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
	// lease.Claimer: two concurrent claims could split an aggregate's
	// consecutive events between two relays).
	LockClaim = 1869574000
	// LockAdopt serializes adopt on one table.
	LockAdopt = 1869574001
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
