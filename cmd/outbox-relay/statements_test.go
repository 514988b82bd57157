package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqlfile"

	"github.com/pgoutbox/outbox/lease"
)

// Every query of sql/ renders, and every statement renders for every kind
// of table: no slot, argument or comment is left in the SQL.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	rendered := map[string]string{}
	for _, cfg := range []lease.Config{{}, {Table: `app.Out"box`, Columns: lease.DebeziumColumns}, {Table: strings.Repeat("x", 60)}} {
		cfg = cfg.WithDefaults()
		status, err := newStatusStatements(cfg.Table, cfg.Columns)
		if err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		inspect, err := newInspectStatements(cfg.Table, cfg.Columns)
		if err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		if err := inspect.render("character varying(64)"); err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		check, err := renderCheckTable(cfg.Table, cfg.Columns)
		if err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		guard, _, err := renderCheckOrderGuard(cfg.Table)
		if err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		unpublished, err := renderUnpublishedCount(cfg.Table)
		if err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
		for name, sql := range map[string]string{
			"StatusCounts": status.counts.SQL, "OldestUnpublished": status.oldest.SQL, "RelayLeases": status.relays.SQL,
			"IDColumnType": inspect.idColumnType.SQL, "Event": inspect.event.SQL, "Blocker": inspect.blocker.SQL,
			"CheckTable": check.SQL, "CheckOrderGuard": guard.SQL, "UnpublishedCount": unpublished.SQL,
		} {
			if sql == "" || sqlfile.Leftover(sql) {
				t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
			}
			rendered[name] = sql
		}
	}
	var names []string
	for _, q := range queries.Queries() {
		names = append(names, q.Name)
	}
	slices.Sort(names)
	var used []string
	for name := range rendered {
		used = append(used, name)
	}
	slices.Sort(used)
	if !reflect.DeepEqual(names, used) {
		t.Errorf("sql/ holds %v; the commands render %v", names, used)
	}
}
