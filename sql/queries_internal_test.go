package sql

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/sqlfile"
)

// leftover is what no rendered statement may hold outside its quoted
// identifiers and literals: a slot, an argument, a comment.
var leftover = regexp.MustCompile(`TEMPLATE|@[A-Za-z_]|--|/\*`)

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
	for _, k := range []string{"aggregate", "batch_size", "body_literal", "columns", "constraint", "constraint_literal",
		"detail_literal", "drops", "event_type", "from", "function", "index", "lock", "lock_timeout", "max_bytes", "max_seq",
		"partition", "partition_count", "payload", "payload_size", "role", "role_literal", "rule", "rules", "seq_column",
		"sequence", "sequence_grant", "sequence_literal", "set_key_partition_body", "key_partition_fn_literal", "set_key_partition_fn_literal", "do_tag", "storage", "storage_literal", "to", "trigger"} {
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
		if sql == "" || leftover.MatchString(bare(sql)) {
			t.Errorf("%s rendered as %q", what, sql)
		}
	}
	for _, s := range []string{relkindStmt.SQL, foreignTableStmt.SQL, missingColumnsStmt.SQL, byCreatedAtStmt.SQL,
		hasDefaultPartitionStmt.SQL, schemaExistsStmt.SQL, currentSchemaStmt.SQL, isPartitionedStmt.SQL,
		eventTypeColumnStmt.SQL, columnCompressionStmt.SQL, adoptTableShapeStmt.SQL} {
		check("a statement rendered once", s)
	}
	for _, table := range []string{"outbox", `app.Out"box`, "billing.o'utbox", strings.Repeat("ü", 30)} {
		for _, r := range []func() (string, error){
			func() (string, error) {
				s, err := renderTable[timePartitioningArgs]("SetTimePartitioning", table)
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("CreateDefaultPartition", table, "partition", "p", "storage", sqladmin.PartitionStorage)
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("PartitionCount", table)
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("XactLock", table, "lock", "pg_advisory_xact_lock(1)")
				return s.SQL, err
			},
			func() (string, error) {
				s, err := renderTable[sqlfile.NoArgs]("PayloadColumnCheck", table, "payload", `"payload"`)
				return s.SQL, err
			},
		} {
			s, err := r()
			if err != nil {
				t.Fatal(err)
			}
			check(table, s)
		}
		for _, name := range []string{"BackfillKeyPartitions", "BackfillKeyPartitionsPartitioned"} {
			s, err := renderTable[backfillArgs](name, table, "aggregate", `"aggregate_id"`, "batch_size", "1000")
			if err != nil {
				t.Fatal(err)
			}
			check(table+" "+name, s.SQL)
		}
		for _, partitioned := range []bool{false, true} {
			for _, compression := range []bool{false, true} {
				stmts, err := adoptStatements(table, AdoptColumns{AggregateID: "aggregateid", EventType: "type", Payload: "pay%load"}, partitioned, false, compression)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range stmts {
					check(table+" adopt", s)
				}
			}
		}
		for _, cols := range []AdoptColumns{{AggregateID: "aggregate_id", EventType: "event_type"}, {AggregateID: "a'b"}} {
			checks, err := rowChecks(tableName(table), cols)
			if err != nil {
				t.Fatal(err)
			}
			body, err := rowCheckBody(checks)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(body, "\nBEGIN\n    IF NOT (") || !strings.HasSuffix(body, "    END IF;\n    RETURN NEW;\nEND\n") {
				t.Errorf("%s: the row checks' body %q", table, body)
			}
		}
		// The script's own comments, between its statements, aside.
		var script []string
		for _, l := range strings.Split(GrantScript("relay", table, "writer"), "\n") {
			if !strings.HasPrefix(l, "--") {
				script = append(script, l)
			}
		}
		check(table+" grants", strings.Join(script, "\n"))
	}
}
