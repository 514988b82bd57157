package retention

import (
	"io/fs"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Every statement renders for every kind of table: no slot, argument or
// comment is left in the SQL once the partition is filled in, the
// partition goes where the slot was, and every file of sql/ renders with
// the Cleaner's slots.
func TestStatementsRender(t *testing.T) {
	t.Parallel()
	leftover := regexp.MustCompile("TEMPLATE|@[A-Za-z_]|--|/\\*|\x00")
	// Quoted identifiers and literals may hold anything.
	quoted := regexp.MustCompile(`'[^']*'|"[^"]*"`)
	const part = `app."Out""box_p20260101_0000"`
	for _, cfg := range []Config{{}, {Table: `app.Out"box`}, {Table: strings.Repeat("x", 60)}} {
		st, err := newStatements(cfg.WithDefaults())
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		v := reflect.ValueOf(st).Elem()
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Name
			sql := v.Field(i).FieldByName("SQL").String()
			open := strings.Contains(sql, partitionSlot)
			if want := name == "partitionDelete" || name == "droppable" || name == "drop"; open != want {
				t.Errorf("%s: %s leaves the partition open: %v, want %v", cfg.Table, name, open, want)
			}
			if open {
				sql = strings.ReplaceAll(sql, partitionSlot, part)
				if !strings.Contains(sql, part) {
					t.Errorf("%s: %s: no partition in %q", cfg.Table, name, sql)
				}
			}
			if sql == "" || leftover.MatchString(quoted.ReplaceAllString(sql, "")) {
				t.Errorf("%s: %s rendered as %q", cfg.Table, name, sql)
			}
		}
	}
	files, err := fs.Glob(sqlFS, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	st, err := newStatements(Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if got := onPartition(st.drop, part).SQL; got != "DROP TABLE "+part {
		t.Errorf("drop: %q", got)
	}
	slots := map[string]string{"table": "t", "partition": "p", "lock_timeout_ms": "1", "time_partitions_lock": "pg_advisory_xact_lock(1, 2)"}
	for _, f := range files {
		if _, err := sqlFiles.Fill(strings.TrimSuffix(strings.TrimPrefix(f, "sql/"), ".sql"), slots); err != nil {
			t.Error(err)
		}
	}
}
