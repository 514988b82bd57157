package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pgoutbox/outbox/internal/sqladmin"
)

// writeLeftovers prints what Inspect found beside the table: the logical
// replication slots of its database, with the WAL each keeps, and the
// publications covering the table (what a Debezium installation leaves
// behind). Nothing when there is neither.
func writeLeftovers(w io.Writer, r *sqladmin.TableReport) {
	if len(r.Slots) > 0 {
		fmt.Fprintln(w, "logical replication slots in this database (each keeps WAL until it is read or dropped):")
		for _, s := range r.Slots {
			state := "active"
			if !s.Active {
				state = "inactive"
			}
			retained := "retained WAL unknown"
			if s.RetainedWALBytes != nil {
				retained = "retaining " + fmtBytes(*s.RetainedWALBytes) + " of WAL"
			}
			fmt.Fprintf(w, "  %s (%s), %s, %s", s.Name, s.Plugin, state, retained)
			if !s.Active {
				fmt.Fprintf(w, ": nothing reads it; if nothing will (a removed Debezium connector?), drop it before the disk fills: SELECT pg_drop_replication_slot('%s')", strings.ReplaceAll(s.Name, "'", "''"))
			}
			fmt.Fprintln(w)
		}
	}
	if len(r.Publications) > 0 {
		fmt.Fprintf(w, "publications covering %s:\n", r.Table)
		for _, p := range r.Publications {
			var what []string
			if p.AllTables {
				what = append(what, "FOR ALL TABLES")
			}
			switch {
			case p.Updates && p.Deletes:
				what = append(what, "publishes its updates and deletes")
			case p.Updates:
				what = append(what, "publishes its updates")
			case p.Deletes:
				what = append(what, "publishes its deletes")
			}
			verdict := "its UPDATEs and DELETEs work (replica identity " + r.ReplicaIdentity + ")"
			if r.ReplicaIdentity == "none" && (p.Updates || p.Deletes) {
				verdict = "the table has no usable replica identity: those statements fail (SQLSTATE 55000)"
			}
			fmt.Fprintf(w, "  %s (%s): %s\n", p.Name, strings.Join(what, ", "), verdict)
		}
	}
}

// fmtBytes prints n bytes in B, kB, MB or GB (powers of 1024).
func fmtBytes(n int64) string {
	const k = 1024
	switch {
	case n < k:
		return fmt.Sprintf("%d B", n)
	case n < k*k:
		return fmt.Sprintf("%.1f kB", float64(n)/k)
	case n < k*k*k:
		return fmt.Sprintf("%.1f MB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%.1f GB", float64(n)/(k*k*k))
}

// checkRunnable refuses, at run's start, a table the relay must not run
// on: an UNLOGGED one (a crash empties it) or one whose UPDATEs fail for
// want of a replica identity (every claim would fail with 55000). Catalog
// lookups only.
func checkRunnable(ctx context.Context, q sqladmin.Querier, table string) error {
	if err := sqladmin.CheckDurability(ctx, q, table); err != nil {
		return err
	}
	return sqladmin.CheckReplicaIdentity(ctx, q, table)
}
