package claim

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/lease"
)

// Every statement renders for every kind of table: no slot or argument is
// left in the SQL, and every query of sql/ renders with a Claimer's slots.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	leftover := regexp.MustCompile(`TEMPLATE|@[A-Za-z_]|--`)
	for _, cfg := range []lease.Config{{}, {Table: `app.Out"box`, Columns: lease.DebeziumColumns}, {Table: strings.Repeat("x", 60)}} {
		c, err := New(nil, cfg)
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		var check func(name string, v reflect.Value)
		check = func(name string, v reflect.Value) {
			switch {
			case v.Kind() == reflect.Pointer:
				check(name, v.Elem())
			case v.Type().Name() == "statements" || v.Type().Name() == "rowStatements":
				for i := 0; i < v.NumField(); i++ {
					check(name+"."+v.Type().Field(i).Name, v.Field(i))
				}
			default:
				f := v.FieldByName("SQL")
				if !f.IsValid() || f.Kind() != reflect.String {
					t.Fatalf("%s: %s has no SQL string field", name, v.Type())
				}
				sql := f.String()
				// Quoted identifiers and literals may hold anything.
				bare := regexp.MustCompile(`'[^']*'|"[^"]*"`).ReplaceAllString(sql, "")
				if sql == "" || leftover.MatchString(bare) {
					t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
				}
			}
		}
		check("statements", reflect.ValueOf(c.st))
	}
	slots, err := claimerSlots(lease.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"created_bound", "row_address", "row_address_o", "match_candidates", "match_settled", "match_settled_o", "match_held"} {
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
