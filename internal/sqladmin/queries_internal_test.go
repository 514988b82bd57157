package sqladmin

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// bare is sql without its quoted identifiers and literals, which may hold
// anything.
func bare(sql string) string {
	return regexp.MustCompile(`'[^']*'|"[^"]*"`).ReplaceAllString(sql, "")
}

// Every query of queries/ renders with the slots the package fills in, is
// named in the package's Go code, and every statement the package builds
// renders, for tables of every kind of name, with no slot, argument or
// comment left in it.
func TestQueriesRender(t *testing.T) {
	t.Parallel()
	qs := queries.Queries()
	if len(qs) == 0 {
		t.Fatal("no queries in queries/")
	}
	var src strings.Builder
	goFiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range goFiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	slots := tableSlots(`app.Out"box`)
	for k, v := range fragments {
		slots[k] = v
	}
	for _, k := range []string{"columns", "default", "from", "lock", "lock_timeout", "max_seq", "partition", "sequence", "storage", "table_literal", "to"} {
		slots[k] = "x"
	}
	for _, q := range qs {
		text, err := queries.Fill(q.Name, slots)
		if err != nil {
			t.Error(err)
			continue
		}
		if text == "" || regexp.MustCompile(`TEMPLATE|--|/\*`).MatchString(bare(text)) {
			t.Errorf("%s:%d: %s rendered as %q", q.File, q.Line, q.Name, text)
		}
		if !strings.Contains(src.String(), `"`+q.Name+`"`) {
			t.Errorf("%s:%d: no Go code of the package names %q", q.File, q.Line, q.Name)
		}
	}

	check := func(what, sql string) {
		t.Helper()
		if sql == "" || sqlfile.Leftover(sql) {
			t.Errorf("%s rendered as %q", what, sql)
		}
	}
	for _, s := range []string{durabilityStmt.SQL, sequenceOfStmt.SQL, inspectTableStmt.SQL, replicaIdentityStmt.SQL,
		publicationsStmt.SQL, nowStmt.SQL, tableSchemaStmt.SQL, childPartitionsStmt.SQL, listPartitionsStmt.SQL,
		privilegesStmt.SQL, setLockTimeoutStmt.SQL, SlotsSQL} {
		check("a statement rendered once", s)
	}
	for _, table := range []string{"outbox", `app.Out"box`, "billing.o'utbox", strings.Repeat("ü", 30)} {
		for _, r := range []func() (string, error){
			func() (string, error) {
				s, err := renderTable[sequenceArgs]("SequenceState", table, "sequence", "s")
				return s.SQL, err
			},
			func() (string, error) { s, err := renderTable[sqlfile.NoArgs]("MaxSeq", table); return s.SQL, err },
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("ReadTimePartitioning", table)
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("LockTimePartitions", table, "lock", "pg_advisory_xact_lock(1)")
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("CreateTimePartition", table, "partition", "p", "storage", PartitionStorage)
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("AttachTimePartition", table, "partition", "p", "from", "'2001-01-01'", "to", "'2001-01-02'")
				return s.SQL, err
			},
		} {
			s, err := r()
			if err != nil {
				t.Fatal(err)
			}
			check(table, s)
		}
		check(table+" fix", (&SequenceBehindError{Table: table, MaxSeq: 7}).Fix())
	}
}
