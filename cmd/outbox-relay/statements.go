package main

import (
	"embed"
	"fmt"
	"strings"

	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
	"github.com/pgoutbox/outbox/lease"
)

// The commands' SQL lives in sql/*.sql, named queries grouped by command
// (status.sql, inspect.sql, checks.sql), rendered by internal/sqlfile (which says how the /* TEMPLATE: name */ slots and
// the @name arguments work) once per command invocation, when the command
// knows its table and columns: never per row or per retry. The only SQL
// left in Go is inRecovery's probe (standby.go), which names no table,
// and the pg_drop_replication_slot hint that writeLeftovers prints
// (leftovers.go), which is output, not a statement the command runs.

//go:embed sql/*.sql
var sqlFS embed.FS

// queries are the commands' named queries.
var queries = sqlfile.MustLoad(sqlFS, "sql")

// The arguments of the statements, by name: each field's position is its
// $n.
type (
	idColumnTypeArgs struct {
		Table  string `arg:"table"` // quoted, read as regclass
		Column string `arg:"column"`
	}
	eventArgs struct {
		ID string `arg:"id"` // cast to the ID column's type
	}
	blockerArgs struct {
		AggregateID string `arg:"aggregate_id"`
		Seq         int64  `arg:"seq"`
	}
)

// commandSlots returns the slots of the statements on table with the
// columns cols (defaults applied): table; the configured columns id,
// aggregate_id and event_type, quoted; aggregate_type_o (that column on
// alias o as text, or NULL::text); state_o and state_b (rowstate.States'
// State on aliases o and b); and the state names dead_lettered,
// claimable, held, leased and backing_off as string literals.
func commandSlots(table string, cols lease.Columns) map[string]string {
	col := sqlname.Column
	st := rowstate.NewStates(table, cols.AggregateID)
	s := map[string]string{
		"table":            sqlname.Quote(table),
		"id":               col(cols.ID),
		"aggregate_id":     col(cols.AggregateID),
		"event_type":       col(cols.EventType),
		"payload":          col(cols.Payload),
		"aggregate_type_o": "NULL::text",
		"state_o":          st.State("o"),
		"state_b":          st.State("b"),
		"dead_lettered":    sqlname.Literal(rowstate.StateDeadLettered),
		"claimable":        sqlname.Literal(rowstate.StateClaimable),
		"held":             sqlname.Literal(rowstate.StateHeld),
		"leased":           sqlname.Literal(rowstate.StateLeased),
		"backing_off":      sqlname.Literal(rowstate.StateBackingOff),
	}
	if cols.AggregateType != "" {
		s["aggregate_type_o"] = "o." + col(cols.AggregateType) + "::text"
	}
	return s
}

// statusStatements are the status command's statements.
type statusStatements struct {
	counts sqlfile.Stmt[sqlfile.NoArgs] // StatusCounts
	oldest sqlfile.Stmt[sqlfile.NoArgs] // OldestUnpublished
	relays sqlfile.Stmt[sqlfile.NoArgs] // RelayLeases
}

// newStatusStatements renders the status command's statements on table.
func newStatusStatements(table string, cols lease.Columns) (*statusStatements, error) {
	st := &statusStatements{}
	r := sqlfile.Renderer{Set: queries, Slots: commandSlots(table, cols)}
	sqlfile.Into(&r, &st.counts, "StatusCounts")
	sqlfile.Into(&r, &st.oldest, "OldestUnpublished")
	sqlfile.Into(&r, &st.relays, "RelayLeases")
	if r.Err != nil {
		return nil, fmt.Errorf("status: render statements: %w", r.Err)
	}
	return st, nil
}

// inspectStatements are the inspect command's statements. The event's
// statement casts to the ID column's type, which idColumnType reads
// first: render renders it, and the blocker's, once that type is known
// (still once per invocation).
type inspectStatements struct {
	idColumnType sqlfile.Stmt[idColumnTypeArgs] // IDColumnType
	event        sqlfile.Stmt[eventArgs]        // Event
	blocker      sqlfile.Stmt[blockerArgs]      // Blocker
	slots        map[string]string
}

// newInspectStatements renders the first of the inspect command's
// statements on table, idColumnType.
func newInspectStatements(table string, cols lease.Columns) (*inspectStatements, error) {
	st := &inspectStatements{slots: commandSlots(table, cols)}
	r := sqlfile.Renderer{Set: queries, Slots: st.slots}
	sqlfile.Into(&r, &st.idColumnType, "IDColumnType")
	if r.Err != nil {
		return nil, fmt.Errorf("inspect: render statements: %w", r.Err)
	}
	return st, nil
}

// render renders the statements that need the ID column's type, idType
// (format_type's spelling, spliced in as a type name).
func (st *inspectStatements) render(idType string) error {
	st.slots["id_type"] = idType
	r := sqlfile.Renderer{Set: queries, Slots: st.slots}
	sqlfile.Into(&r, &st.event, "Event")
	sqlfile.Into(&r, &st.blocker, "Blocker")
	if r.Err != nil {
		return fmt.Errorf("inspect: render statements: %w", r.Err)
	}
	return nil
}

// renderCheckTable renders checkTable's statement on table with the
// columns cols (defaults applied).
func renderCheckTable(table string, cols lease.Columns) (sqlfile.Stmt[sqlfile.NoArgs], error) {
	var event []string
	for _, name := range []string{cols.ID, cols.AggregateID, cols.EventType, cols.Payload, cols.AggregateType} {
		if name != "" {
			event = append(event, sqlname.Column(name))
		}
	}
	s, err := sqlfile.Render[sqlfile.NoArgs](queries, "CheckTable", map[string]string{
		"table":         sqlname.Quote(table),
		"event_columns": strings.Join(event, ", "),
	})
	if err != nil {
		return s, fmt.Errorf("check outbox table %q: render: %w", table, err)
	}
	return s, nil
}

// renderCheckOrderGuard renders CheckOrderGuard for table, and
// returns the guard's quoted name with it.
func renderCheckOrderGuard(table string) (sqlfile.Stmt[sqlfile.NoArgs], string, error) {
	guard := sqlname.OrderGuard(table)
	s, err := sqlfile.Render[sqlfile.NoArgs](queries, "CheckOrderGuard", map[string]string{"guard": guard})
	if err != nil {
		return s, guard, fmt.Errorf("check order guard of %q: render: %w", table, err)
	}
	return s, guard, nil
}

// renderUnpublishedCount renders UnpublishedCount for table.
func renderUnpublishedCount(table string) (sqlfile.Stmt[sqlfile.NoArgs], error) {
	s, err := sqlfile.Render[sqlfile.NoArgs](queries, "UnpublishedCount", map[string]string{"table": sqlname.Quote(table)})
	if err != nil {
		return s, fmt.Errorf("count unpublished rows of %q: render: %w", table, err)
	}
	return s, nil
}
