package metrics

import (
	"embed"
	"fmt"
	"strconv"

	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// The gauges' and the checks' SQL lives in sql/*.sql, named queries and
// fragments grouped by concern (gauges.sql, checks.sql), rendered by
// internal/sqlfile
// (which says how the /* TEMPLATE: name */ slots and the @name arguments
// work) once, when New builds the Metrics: a refresh rewrites nothing; the
// table check's statement, which names the table's sequence, is rendered
// when the check has looked the sequence up (tableCheckSQL).

//go:embed sql/*.sql
var sqlFS embed.FS

// queries are the Metrics' named queries.
var queries = sqlfile.MustLoad(sqlFS, "sql")

// statements are the Metrics' SQL, rendered from sql/*.sql by New.
// Metrics embeds them.
type statements struct {
	// statsSQL reads the table gauges (TableStats with Counts);
	// agesSQL is the same without the counts (NoCounts: NULL
	// instead), what an early refresh reads (refresh).
	statsSQL, agesSQL string
	// settings opens the gauges' and the table check's statement batches
	// (SessionSettings).
	settings sqlfile.Stmt[sqlfile.NoArgs]
	// owned finds the oldest claimable row of the key partitions a member
	// owns (OwnedClaimable):
	// outbox_relay_oldest_claimable_age_seconds.
	owned sqlfile.Stmt[ownedArgs]
	// slots are the slots the statements were rendered with, for the
	// table check's (tableCheckSQL).
	slots map[string]string
	// maxSeq reads the table's highest seq (MaxSeq).
	maxSeq sqlfile.Stmt[sqlfile.NoArgs]
	// snapshotHolders finds the oldest snapshot holder
	// (OldestSnapshot); snapshotVisibility whether this role sees
	// other roles' sessions (SnapshotVisibility).
	snapshotHolders, snapshotVisibility sqlfile.Stmt[sqlfile.NoArgs]
	// recovery is the "database" readiness check (Recovery).
	recovery sqlfile.Stmt[sqlfile.NoArgs]
}

// The arguments of the statements, by name: each field's position is its
// $n (internal/sqlfile).
type (
	ownedArgs struct {
		Member string `arg:"member"`
	}
)

// tableCheckSQL renders the table check's statement (TableCheck) for
// the table's seq sequence seq (quoted, as regclass prints it; "" when it
// has none) and its DEFAULT partition def (the same; "" when it has
// none). The check looks both up at its first run (and again after a
// failure), not when New renders the other statements, so it renders
// this one then.
func (s *statements) tableCheckSQL(seq, def string) (string, error) {
	frag := "NoSequenceColumns"
	var extra []string
	if seq != "" {
		frag = "SequenceColumns"
		extra = []string{"sequence", seq, "sequence_literal", sqlname.Literal(seq)}
	}
	cols, err := queries.Fill(frag, sqlfile.With(s.slots, extra...))
	if err != nil {
		return "", fmt.Errorf("metrics: render the table check: %w", err)
	}
	rows := "NoDefaultRows"
	if def != "" {
		rows = "DefaultRows"
	}
	defRows, err := queries.Fill(rows, sqlfile.With(s.slots, "default", def))
	if err != nil {
		return "", fmt.Errorf("metrics: render the table check: %w", err)
	}
	st, err := sqlfile.Render[sqlfile.NoArgs](queries, "TableCheck", sqlfile.With(s.slots, "sequence_columns", cols, "default_rows", defRows))
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
// literal), replication_slots (sqladmin.SlotsSQL).
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
		"replication_slots": sqladmin.SlotsSQL,
	}
}

// newStatements renders cfg's statements (cfg with its defaults).
func newStatements(cfg Config) (*statements, error) {
	s := metricsSlots(cfg)
	// The fragments go into TableStats (slot counts).
	frag := map[string]string{}
	for _, name := range []string{"Counts", "NoCounts"} {
		text, err := queries.Fill(name, s)
		if err != nil {
			return nil, fmt.Errorf("metrics: render statements: %w", err)
		}
		frag[name] = text
	}
	st := &statements{slots: s}
	var stats, ages sqlfile.Stmt[sqlfile.NoArgs]
	r := sqlfile.Renderer{Set: queries}
	r.Slots = sqlfile.With(s, "counts", frag["Counts"])
	sqlfile.Into(&r, &stats, "TableStats")
	r.Slots = sqlfile.With(s, "counts", frag["NoCounts"])
	sqlfile.Into(&r, &ages, "TableStats")
	r.Slots = s
	sqlfile.Into(&r, &st.settings, "SessionSettings")
	sqlfile.Into(&r, &st.owned, "OwnedClaimable")
	sqlfile.Into(&r, &st.maxSeq, "MaxSeq")
	sqlfile.Into(&r, &st.snapshotHolders, "OldestSnapshot")
	sqlfile.Into(&r, &st.snapshotVisibility, "SnapshotVisibility")
	sqlfile.Into(&r, &st.recovery, "Recovery")
	if r.Err != nil {
		return nil, fmt.Errorf("metrics: render statements: %w", r.Err)
	}
	st.statsSQL, st.agesSQL = stats.SQL, ages.SQL
	return st, nil
}
