package metrics

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqlfile"

	"github.com/pgoutbox/outbox/internal/sqlname"
)

// Every statement renders for every kind of table: no slot, argument,
// comment or open sequence is left in the SQL, and every query of sql/
// renders with the Metrics' slots.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{}, {Table: `app.Out"box`, AggregateColumn: "agg col"}, {Table: strings.Repeat("x", 60)}} {
		st, err := newStatements(cfg.WithDefaults())
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		check := func(name, sql string) {
			if sql == "" || sqlfile.Leftover(sql) {
				t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
			}
		}
		v := reflect.ValueOf(st).Elem()
		for i := 0; i < v.NumField(); i++ {
			name, f := v.Type().Field(i).Name, v.Field(i)
			switch {
			case name == "slots":
			case f.Kind() == reflect.String:
				check(name, f.String())
			default:
				check(name, f.FieldByName("SQL").String())
			}
		}
		for _, seq := range []string{"outbox_seq_seq", `app."Out""box_seq_seq`} {
			sql, err := st.tableCheckSQL(seq, "")
			if err != nil {
				t.Fatal(err)
			}
			check("tableCheckSQL("+seq+")", sql)
			if !strings.Contains(sql, "FROM "+seq+")") || !strings.Contains(sql, "oid = "+sqlname.Literal(seq)+"::regclass") {
				t.Errorf("%s: the table check names not the sequence %s: %s", cfg.Table, seq, sql)
			}
		}
		sql, err := st.tableCheckSQL("", "")
		if err != nil {
			t.Fatal(err)
		}
		check("tableCheckSQL()", sql)
		sql, err = st.tableCheckSQL("", `app."Out""box_default"`)
		if err != nil {
			t.Fatal(err)
		}
		check("tableCheckSQL(default)", sql)
	}
	slots := metricsSlots(Config{}.WithDefaults())
	for _, k := range []string{"counts", "sequence_columns", "sequence", "sequence_literal", "default", "default_rows"} {
		slots[k] = "x"
	}
	qs := queries.Queries()
	if len(qs) == 0 {
		t.Fatal("no queries in sql/")
	}
	for _, q := range qs {
		if _, err := queries.Fill(q.Name, slots); err != nil {
			t.Error(err)
		}
	}
}
