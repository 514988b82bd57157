package retention

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// Every statement renders for every kind of table: no slot, argument or
// comment is left in the SQL once the partition is filled in, the
// partition goes where the slot was, and every query of sql/ renders with
// the Cleaner's slots.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	const part = `app."Out""box_p20260101_0000"`
	for _, cfg := range []Config{{}, {Table: `app.Out"box`}, {Table: strings.Repeat("x", 60)}} {
		st, err := newStatements(cfg.WithDefaults())
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		v := reflect.ValueOf(st).Elem()
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Name
			if name == "slots" {
				continue
			}
			sql := v.Field(i).FieldByName("SQL").String()
			if sql == "" || sqlfile.Leftover(sql) {
				t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
			}
		}
		del, err1 := onPartition[deleteArgs](st, "DeleteBatch", "table", part)
		dropOK, err2 := onPartition[retentionArgs](st, "Droppable", "partition", part)
		drop, err3 := onPartition[sqlfile.NoArgs](st, "DropPartition", "partition", part)
		for name, sql := range map[string]string{"DeleteBatch": del.SQL, "Droppable": dropOK.SQL, "DropPartition": drop.SQL} {
			if !strings.Contains(sql, part) || sqlfile.Leftover(sql) {
				t.Errorf("%s: %s on a partition rendered as %q", cfg.Table, name, sql)
			}
		}
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("%s: %v", cfg.Table, err)
		}
	}
	qs := queries.Queries()
	if len(qs) == 0 {
		t.Fatal("no queries in sql/")
	}
	st, err := newStatements(Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := onPartition[sqlfile.NoArgs](st, "DropPartition", "partition", part); err != nil || got.SQL != "DROP TABLE "+part {
		t.Errorf("drop: %q, %v", got.SQL, err)
	}
	slots := map[string]string{"table": "t", "partition": "p", "lock_timeout_ms": "1", "time_partitions_lock": "pg_advisory_xact_lock(1, 2)"}
	for _, q := range qs {
		if _, err := queries.Fill(q.Name, slots); err != nil {
			t.Error(err)
		}
	}
}
