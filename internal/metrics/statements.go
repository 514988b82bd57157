package metrics

import (
	"embed"
	"fmt"
	"maps"
	"strconv"

	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// The gauges' and the checks' SQL lives in sql/*.sql, one statement (or
// one fragment of a statement) per file, rendered by internal/sqlfile
// (which says how the /* TEMPLATE: name */ slots and the @name arguments
// work) once, when New builds the Metrics: a refresh rewrites nothing; the
// table check's statement, which names the table's sequence, is rendered
// when the check has looked the sequence up (tableCheckSQL).

//go:embed sql/*.sql
var sqlFS embed.FS

// sqlFiles are the Metrics' statement files.
var sqlFiles = sqlfile.NewFiles(sqlFS, "sql")

// noArgs is the argument struct of a statement without arguments.
type noArgs = sqlfile.NoArgs

// stmt is one rendered statement whose $1, $2, ... are the fields of A in
// order.
type stmt[A any] = sqlfile.Stmt[A]

// statements are the Metrics' SQL, rendered from sql/*.sql by New.
// Metrics embeds them.
type statements struct {
	// statsSQL reads the table gauges (table_stats.sql with counts.sql);
	// agesSQL is the same without the counts (no_counts.sql: NULL
	// instead), what an early refresh reads (refresh).
	statsSQL, agesSQL string
	// settings opens the gauges' and the table check's statement batches
	// (session_settings.sql).
	settings stmt[noArgs]
	// owned finds the oldest claimable row of the key partitions a member
	// owns (owned_claimable.sql):
	// outbox_relay_oldest_claimable_age_seconds.
	owned stmt[ownedArgs]
	// slots are the slots the statements were rendered with, for the
	// table check's (tableCheckSQL).
	slots map[string]string
	// maxSeq reads the table's highest seq (max_seq.sql).
	maxSeq stmt[noArgs]
	// snapshotHolders finds the oldest snapshot holder
	// (oldest_snapshot.sql); snapshotVisibility whether this role sees
	// other roles' sessions (snapshot_visibility.sql).
	snapshotHolders, snapshotVisibility stmt[noArgs]
	// recovery is the "database" readiness check (recovery.sql).
	recovery stmt[noArgs]
}

// The arguments of the statements, by name: each field's position is its
// $n (internal/sqlfile).
type (
	ownedArgs struct {
		Member string `arg:"member"`
	}
)

// tableCheckSQL renders the table check's statement (table_check.sql) for
// the table's seq sequence seq (quoted, as regclass prints it; "" when it
// has none). The check looks the sequence up at its first run (and again
// after a failure), not when New renders the other statements, so it
// renders this one then.
func (s *statements) tableCheckSQL(seq string) (string, error) {
	frag := "no_sequence_columns"
	extra := map[string]string{}
	if seq != "" {
		frag = "sequence_columns"
		extra = map[string]string{"sequence": seq, "sequence_literal": sqlname.Literal(seq)}
	}
	cols, err := sqlFiles.Fill(frag, withSlots(s.slots, extra))
	if err != nil {
		return "", fmt.Errorf("metrics: render the table check: %w", err)
	}
	st, err := sqlfile.Render[noArgs](sqlFiles, "table_check", withSlots(s.slots, map[string]string{"sequence_columns": cols}))
	if err != nil {
		return "", fmt.Errorf("metrics: render the table check: %w", err)
	}
	return st.SQL, nil
}

// metricsSlots returns the slots of cfg's statements: table,
// table_literal (the quoted name as a string literal, for regclass),
// partitions (the table of the key partitions' owners beside it) and
// key_partition (the function beside it that computes a row's key
// partition; migration 00009), aggregate_id (the configured column), live_o and
// claimable_o (rowstate.States on alias o), head_rows (headRows),
// statement_timeout (Config.QueryTimeout in milliseconds, as a string
// literal), replication_slots (outboxsql.SlotsSQL).
func metricsSlots(cfg Config) map[string]string {
	st := rowstate.NewStates(cfg.Table, cfg.AggregateColumn)
	return map[string]string{
		"table":             sqlname.Quote(cfg.Table),
		"table_literal":     sqlname.Literal(sqlname.Quote(cfg.Table)),
		"partitions":        sqlname.Beside(cfg.Table, "_partitions"),
		"key_partition":     sqlname.Beside(cfg.Table, "_key_partition"),
		"aggregate_id":      sqlname.Column(cfg.AggregateColumn),
		"live_o":            st.Live("o"),
		"claimable_o":       st.Claimable("o"),
		"head_rows":         strconv.Itoa(headRows),
		"statement_timeout": sqlname.Literal(strconv.FormatInt(cfg.QueryTimeout.Milliseconds(), 10)),
		"replication_slots": outboxsql.SlotsSQL,
	}
}

// newStatements renders cfg's statements (cfg with its defaults).
func newStatements(cfg Config) (*statements, error) {
	s := metricsSlots(cfg)
	// The fragments go into table_stats.sql (counts).
	frag := map[string]string{}
	for _, name := range []string{"counts", "no_counts"} {
		text, err := sqlFiles.Fill(name, s)
		if err != nil {
			return nil, fmt.Errorf("metrics: render statements: %w", err)
		}
		frag[name] = text
	}
	st := &statements{slots: s}
	var stats, ages stmt[noArgs]
	r := sqlfile.Renderer{Files: sqlFiles}
	r.Slots = withSlots(s, map[string]string{"counts": frag["counts"]})
	sqlfile.Into(&r, &stats, "table_stats")
	r.Slots = withSlots(s, map[string]string{"counts": frag["no_counts"]})
	sqlfile.Into(&r, &ages, "table_stats")
	r.Slots = s
	sqlfile.Into(&r, &st.settings, "session_settings")
	sqlfile.Into(&r, &st.owned, "owned_claimable")
	sqlfile.Into(&r, &st.maxSeq, "max_seq")
	sqlfile.Into(&r, &st.snapshotHolders, "oldest_snapshot")
	sqlfile.Into(&r, &st.snapshotVisibility, "snapshot_visibility")
	sqlfile.Into(&r, &st.recovery, "recovery")
	if r.Err != nil {
		return nil, fmt.Errorf("metrics: render statements: %w", r.Err)
	}
	st.statsSQL, st.agesSQL = stats.SQL, ages.SQL
	return st, nil
}

// withSlots returns a copy of slots with extra added.
func withSlots(slots, extra map[string]string) map[string]string {
	out := maps.Clone(slots)
	maps.Copy(out, extra)
	return out
}
