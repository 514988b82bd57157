package sql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/testenv"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// wantPayloadSizes inserts into table (its aggregate ID column agg,
// payload column payload, of a JSON type) a 900 KB payload, a small one, a
// NULL one and a copy of the stored 900 KB one, and fails t unless each
// row's payload_size is the payload's uncompressed size: about 900,000 for
// the large ones, although the table stores them compressed to a few KB.
func wantPayloadSizes(t *testing.T, pool *pgxpool.Pool, table, agg, payload string) {
	t.Helper()
	ctx := context.Background()
	insert := `INSERT INTO ` + table + ` (id, ` + agg + `, type, ` + payload + `) VALUES (gen_random_uuid(), $1, 't', $2)`
	if !strings.Contains(table, "outboxevent") {
		insert = strings.Replace(insert, ", type,", ", event_type,", 1)
	}
	for _, row := range []struct{ agg, payload string }{
		{"large", `{"n": 1, "pad": "` + strings.Repeat("x", 900000) + `"}`},
		{"small", `{"n": 1}`},
		{"null", ""},
	} {
		var p any = row.payload
		if row.payload == "" {
			p = nil
		}
		if _, err := pool.Exec(ctx, insert, row.agg, p); err != nil {
			t.Fatalf("%s: insert %s: %v", table, row.agg, err)
		}
	}
	// A stored payload, compressed in its table, copied by INSERT ...
	// SELECT: the trigger gets it compressed.
	copyRow := strings.Replace(insert, "VALUES (gen_random_uuid(), $1, 't', $2)",
		"SELECT gen_random_uuid(), 'copy', 't', "+payload+" FROM "+table+" WHERE "+agg+" = 'large'", 1)
	if _, err := pool.Exec(ctx, copyRow); err != nil {
		t.Fatalf("%s: insert ... select: %v", table, err)
	}
	rows, err := pool.Query(ctx, `SELECT `+agg+`::text, payload_size, pg_column_size(`+payload+`), coalesce(octet_length(`+payload+`::text), 0) FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var name string
		var size *int
		var stored *int
		var text int
		if err := rows.Scan(&name, &size, &stored, &text); err != nil {
			t.Fatal(err)
		}
		seen++
		if size == nil {
			t.Errorf("%s: row %s has no payload_size", table, name)
			continue
		}
		switch name {
		case "large", "copy":
			// The binary jsonb's size, about the JSON text's.
			if *size < 900000 || *size > 900100 {
				t.Errorf("%s: row %s: payload_size %d, want about 900,000 (its text is %d bytes)", table, name, *size, text)
			}
			if name == "large" && (stored == nil || *stored > 100000) {
				t.Errorf("%s: the stored payload takes %v bytes: the test wants it compressed", table, stored)
			}
		case "small":
			if *size < 8 || *size > 64 {
				t.Errorf("%s: row small: payload_size %d, want a few bytes", table, *size)
			}
		case "null":
			if *size != 0 {
				t.Errorf("%s: row null: payload_size %d, want 0", table, *size)
			}
		}
	}
	if err := rows.Err(); err != nil || seen != 4 {
		t.Fatalf("%s: %d rows (err %v), want 4", table, seen, err)
	}
}

// Migration 00010: the insert trigger records each new row's payload
// size, uncompressed, whatever the writer; the rows written before keep
// NULL (a claim counts them as its whole byte bound). An adopted table
// gets the same from AdoptTable and AdoptWith (its payload column by
// name); a payload column the table does not have fails adopt, naming it.
func TestInsertTriggerRecordsThePayloadSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("migrated", func(t *testing.T) {
		t.Parallel()
		db := testenv.DB(t)
		if _, err := migrations(t, db.Pool).UpTo(ctx, 9); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 'old', 't', '{"n": 0}')`); err != nil {
			t.Fatal(err)
		}
		res, err := outboxsql.Migrate(ctx, db.Pool)
		if err != nil || len(res) != 2 || res[0].Version != 10 || res[1].Version != 11 {
			t.Fatalf("migrate: %+v, %v; want migrations 10 and 11 applied", res, err)
		}
		var old *int
		if err := db.Pool.QueryRow(ctx, `DELETE FROM outbox WHERE aggregate_id = 'old' RETURNING payload_size`).Scan(&old); err != nil || old != nil {
			t.Fatalf("a row written before migration 10: payload_size %v (err %v), want NULL", old, err)
		}
		wantPayloadSizes(t, db.Pool, "outbox", "aggregate_id", "payload")
	})
	t.Run("adopted", func(t *testing.T) {
		t.Parallel()
		db := testenv.DB(t)
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE outboxevent (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)`); err != nil {
			t.Fatal(err)
		}
		if err := outboxsql.Adopt(ctx, db.Pool, "outboxevent", "aggregateid"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `ALTER TABLE outboxevent ALTER COLUMN aggregatetype SET DEFAULT 'order'`); err != nil {
			t.Fatal(err)
		}
		wantPayloadSizes(t, db.Pool, "outboxevent", "aggregateid", "payload")
	})
	t.Run("adopted column", func(t *testing.T) {
		t.Parallel()
		db := testenv.DB(t)
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE events (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, body json)`); err != nil {
			t.Fatal(err)
		}
		err := outboxsql.AdoptWith(ctx, db.Pool, "events", outboxsql.AdoptColumns{})
		if err == nil || !strings.Contains(err.Error(), `payload column "payload"`) {
			t.Fatalf("adopt of a table without a payload column: %v, want an error naming it", err)
		}
		var seq bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'events'::regclass AND attname = 'seq')`).Scan(&seq); err != nil || seq {
			t.Fatalf("the refused adopt changed the table (seq column: %v, err %v)", seq, err)
		}
		if err := outboxsql.AdoptWith(ctx, db.Pool, "events", outboxsql.AdoptColumns{Payload: "body"}); err != nil {
			t.Fatal(err)
		}
		wantPayloadSizes(t, db.Pool, "events", "aggregate_id", "body")
	})
}
