package main

import (
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqlfile"

	"github.com/pgoutbox/outbox/lease"
)

// Every file of sql/ renders, and every statement renders for every kind
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
			"status_counts": status.counts.SQL, "oldest_unpublished": status.oldest.SQL, "relay_leases": status.relays.SQL,
			"id_column_type": inspect.idColumnType.SQL, "event": inspect.event.SQL, "blocker": inspect.blocker.SQL,
			"check_table": check.SQL, "check_order_guard": guard.SQL, "unpublished_count": unpublished.SQL,
		} {
			if sql == "" || sqlfile.Leftover(sql) {
				t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
			}
			rendered[name] = sql
		}
	}
	files, err := fs.Glob(sqlFS, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(f, "sql/"), ".sql"))
	}
	var used []string
	for name := range rendered {
		used = append(used, name)
	}
	slices.Sort(used)
	if !reflect.DeepEqual(names, used) {
		t.Errorf("sql/ holds %v; the commands render %v", names, used)
	}
}
