package sql

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// GrantScript returns the SQL that gives role every privilege the relay
// needs on table (what the relay's start-up check looks for, with every
// one of Needs), and, if writerRole is not empty, what a writer needs
// (INSERT; the seq identity needs no privilege on its sequence). Run it as the table's owner or a superuser
// (GRANT pg_read_all_stats needs a superuser, or a role with ADMIN OPTION
// on it), in the table's database, after outbox-relay migrate or adopt.
// The schema and the sequence are looked up where the script runs (a DO
// block), so an unqualified table is found through the search_path as the
// relay finds it.
func GrantScript(role, table, writerRole string) string {
	// The statements are queries/grants.sql's; the comments between them
	// are the script's own, written here, since rendering drops a query's.
	slots := sqlfile.With(tableSlots(table), "role", sqlname.Column(role), "role_literal", sqlname.Literal(sqlname.Column(role)))
	var b strings.Builder
	fmt.Fprintf(&b, "-- Privileges of the outbox relay's role %s on outbox table %s (outbox-relay grants).\n", role, table)
	b.WriteString("-- Run as the table's owner or a superuser, in its database, after outbox-relay migrate or adopt.\n")
	b.WriteString("-- The table's schema, and its seq sequence, whose last value the claim floor reads:\n")
	writeLookups(&b, slots, true)
	b.WriteString("-- Claims and marks (SELECT, UPDATE); retention deletes published rows (DELETE; --retention, on by default):\n")
	b.WriteString(queries.MustFill("GrantRelayTable", slots) + "\n")
	b.WriteString("-- The claims' order guard:\n")
	b.WriteString(queries.MustFill("GrantOrderGuard", slots) + "\n")
	b.WriteString("-- Ownership of key partitions: the members' heartbeat, who owns which partition, the generation:\n")
	b.WriteString(queries.MustFill("GrantRelays", slots) + "\n")
	b.WriteString(queries.MustFill("GrantKeyPartitions", slots) + "\n")
	b.WriteString("-- A time-partitioned table (migrate --time-partitioned; nothing on a plain table): creating its coming partitions and\n")
	b.WriteString("-- dropping old ones (--retention-drop-partitions) need membership in the owner roles of the table and its partitions and\n")
	b.WriteString("-- CREATE on its schema; a superuser owner is refused, saying why and the fix:\n")
	b.WriteString(queries.MustFill("GrantTimePartitions", slots) + "\n")
	b.WriteString("-- The held-snapshot watch sees other roles' transactions (needs a superuser, or ADMIN OPTION on pg_read_all_stats):\n")
	b.WriteString(queries.MustFill("GrantReadAllStats", slots) + "\n")
	if writerRole != "" {
		w := sqlfile.With(slots, "role", sqlname.Column(writerRole), "role_literal", sqlname.Literal(sqlname.Column(writerRole)))
		fmt.Fprintf(&b, "\n-- Writers of role %s (outbox.Add or a plain INSERT): INSERT only; the seq identity needs no privilege on its sequence.\n", writerRole)
		writeLookups(&b, w, false)
		b.WriteString(queries.MustFill("GrantWriter", w) + "\n")
	}
	return b.String()
}

// writeLookups writes the DO block that grants USAGE on the table's
// schema (and, with sequence, SELECT on its seq sequence) to the role of
// slots (GrantLookups).
func writeLookups(b *strings.Builder, slots map[string]string, sequence bool) {
	seq := ""
	if sequence {
		seq = queries.MustFill("GrantSequence", slots)
	}
	b.WriteString(queries.MustFill("GrantLookups", sqlfile.With(slots, "sequence_grant", seq)) + "\n")
}
