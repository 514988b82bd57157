package sqladmin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/sqlfile"
	"github.com/pgoutbox/outbox/internal/sqlname"
)

// What a database setting can do to the outbox table without a word: an
// UNLOGGED table (or sequence) is emptied by a crash; a sequence restarted
// below the table's highest seq (a logical-replication cutover does not
// carry sequences over) makes new events sort below published ones, where
// only the relay's rescan finds them; a publication that publishes the
// table's UPDATEs while it has no usable replica identity makes every
// UPDATE fail (SQLSTATE 55000), the relay's claims and marks included; a
// logical replication slot nobody reads (a Debezium connector that was
// removed) keeps WAL until the disk fills. sql.Migrate, sql.Adopt and the
// relay refuse the first and sql.Adopt the third; Inspect reports them all.

// UnloggedError says that the outbox table, or its seq sequence, is
// UNLOGGED: PostgreSQL empties an unlogged table after a crash or an
// immediate shutdown (pg_ctl stop -m immediate, a failover) and does not
// replicate it, so every event in it, published or not, would be lost.
// sql.Migrate, sql.Adopt and the relay refuse such a table.
type UnloggedError struct {
	// Table is the outbox table, as given.
	Table string
	// Sequence is the table's seq sequence when that is what is unlogged
	// (the table itself is logged then); "" when the table is unlogged.
	Sequence string
	// Partition is, on a partitioned table, the first of its partitions
	// (as regclass prints it) that is unlogged, when that is what is: a
	// crash empties that partition alone.
	Partition string
}

// Error names the table (or sequence) and the statement that makes it
// durable.
func (e *UnloggedError) Error() string {
	if e.Partition != "" {
		return fmt.Sprintf("partition %s of outbox table %s is UNLOGGED: a crash or an immediate shutdown of PostgreSQL empties it, losing every event in it, published or not, and standbys never see it; make it durable: ALTER TABLE %s SET LOGGED",
			e.Partition, e.Table, e.Partition)
	}
	if e.Sequence != "" {
		return fmt.Sprintf("the sequence %s of outbox table %s is UNLOGGED: after a crash it starts over and new events get seqs below the published ones; make it durable: ALTER SEQUENCE %s SET LOGGED",
			e.Sequence, e.Table, e.Sequence)
	}
	return fmt.Sprintf("outbox table %s is UNLOGGED: a crash or an immediate shutdown of PostgreSQL empties it, losing every event, published or not, and standbys never see it; make it durable: ALTER TABLE %s SET LOGGED (this rewrites the table under an ACCESS EXCLUSIVE lock)",
		e.Table, sqlname.Readable(e.Table))
}

// SequenceBehindError says that the table's seq sequence will hand out a
// value at or below the highest seq already in the table. New events then
// sort below events the relay has passed (its floor) and wait for its
// rescan, up to a minute; and seqs no longer follow insert order.
type SequenceBehindError struct {
	// Table is the outbox table, as given; Sequence its seq sequence.
	Table, Sequence string
	// Next is the value nextval would return next; MaxSeq the highest seq
	// the table holds (or, from the running relay, has held).
	Next, MaxSeq int64
}

// Fix returns the statement that moves the sequence past MaxSeq:
// SELECT setval(pg_get_serial_sequence('<table>','seq'), <MaxSeq>)
// (SequenceFix).
func (e *SequenceBehindError) Fix() string {
	return queries.MustFill("SequenceFix", map[string]string{
		"table_literal": sqlname.Literal(sqlname.Readable(e.Table)),
		"max_seq":       strconv.FormatInt(e.MaxSeq, 10),
	})
}

// Error names the sequence, the values and the fix.
func (e *SequenceBehindError) Error() string {
	return fmt.Sprintf("the sequence %s of outbox table %s hands out seq %d next, at or below the table's highest seq %d (restarted, e.g. by a logical-replication cutover, which does not carry sequences over?): new events sort below published ones and wait for the relay's rescan, up to a minute each; fix: %s",
		e.Sequence, e.Table, e.Next, e.MaxSeq, e.Fix())
}

// ReplicaIdentityError says that publications publish the UPDATEs (or
// DELETEs) of the outbox table while it has no usable replica identity:
// PostgreSQL then refuses every UPDATE (DELETE) of it with SQLSTATE 55000,
// "cannot update table ... because it does not have a replica identity
// and publishes updates" — every claim and mark of the relay (every
// retention DELETE). Typically a FOR ALL TABLES publication left by a
// Debezium installation, on a table without a primary key. sql.Adopt refuses
// such a table.
type ReplicaIdentityError struct {
	// Table is the outbox table, as given.
	Table string
	// Publications publish its UPDATEs or DELETEs.
	Publications []string
	// Updates is true when one of them publishes UPDATEs (else only
	// DELETEs fail).
	Updates bool
}

// Error names the publications and the fixes.
func (e *ReplicaIdentityError) Error() string {
	what := "UPDATE (every claim and mark of the relay) and DELETE (retention)"
	if !e.Updates {
		what = "DELETE (the relay's retention)"
	}
	t := sqlname.Readable(e.Table)
	var fixes []string
	for _, p := range e.Publications {
		q := sqlname.Column(p)
		if sqlname.Readable(p) == p {
			q = p
		}
		fixes = append(fixes, "DROP PUBLICATION "+q, "ALTER PUBLICATION "+q+" SET (publish = 'insert')")
	}
	return fmt.Sprintf("every %s of outbox table %s fails (SQLSTATE 55000): publication %s publishes them and the table has no usable replica identity; give it one (a PRIMARY KEY, or ALTER TABLE %s REPLICA IDENTITY FULL), or, if nothing reads the publication any more (a removed Debezium connector?), %s",
		what, e.Table, strings.Join(e.Publications, ", "), t, strings.Join(fixes, " or "))
}

// CheckDurability returns an *UnloggedError when table, or its seq
// sequence, is UNLOGGED; nil when both are logged, when the table does not
// exist (sql.Migrate creates it logged) and when it has no seq identity. Other
// errors are the query's, wrapped as "check table <table>: ...".
func CheckDurability(ctx context.Context, q Querier, table string) error {
	d, err := queryOne[durability](ctx, q, durabilityStmt.SQL, durabilityStmt.Args(tableArgs{sqlname.Quote(table)})...)
	if err != nil {
		return fmt.Errorf("check table %s: %w", table, err)
	}
	switch {
	case !d.Exists:
		return nil
	case d.Unlogged:
		return &UnloggedError{Table: table}
	case d.Partition != nil:
		return &UnloggedError{Table: table, Partition: *d.Partition}
	case d.Sequence != nil && d.SequenceUnlogged != nil && *d.SequenceUnlogged:
		return &UnloggedError{Table: table, Sequence: *d.Sequence}
	}
	return nil
}

// durability is a row of Durability.
type durability struct {
	Exists           bool    `db:"table_exists"`
	Unlogged         bool    `db:"unlogged"`
	Sequence         *string `db:"sequence"`
	SequenceUnlogged *bool   `db:"sequence_unlogged"`
	Partition        *string `db:"unlogged_partition"`
}

// SequenceOf returns the sequence of table's seq column as regclass
// prints it (quoted and schema-qualified as needed), or "" when the
// column has none. Errors are wrapped as "sequence of <table>: ...".
func SequenceOf(ctx context.Context, q RowQuerier, table string) (string, error) {
	var seq *string
	if err := q.QueryRow(ctx, sequenceOfStmt.SQL, sequenceOfStmt.Args(tableArgs{sqlname.Quote(table)})...).Scan(&seq); err != nil {
		return "", fmt.Errorf("sequence of %s: %w", table, err)
	}
	if seq == nil {
		return "", nil
	}
	return *seq, nil
}

// TableReport is what Inspect found about an outbox table and its
// database.
type TableReport struct {
	// Table is the outbox table, as given.
	Table string `json:"table"`
	// Unlogged and UnloggedSequence: the table, or its seq sequence, is
	// UNLOGGED (see UnloggedError).
	Unlogged         bool `json:"unlogged"`
	UnloggedSequence bool `json:"unlogged_sequence"`
	// UnloggedPartition is, on a partitioned table, its first UNLOGGED
	// partition ("" when none is).
	UnloggedPartition string `json:"unlogged_partition,omitempty"`
	// Partitioned is true for a partitioned table; Partitions then counts
	// its leaf partitions.
	Partitioned bool `json:"partitioned"`
	Partitions  int  `json:"partitions,omitempty"`
	// Sequence is the seq identity's sequence ("" if the table has none),
	// SequenceNext the value its nextval returns next, MaxSeq the table's
	// highest seq (0 when empty).
	Sequence     string `json:"sequence"`
	SequenceNext int64  `json:"sequence_next"`
	MaxSeq       int64  `json:"max_seq"`
	// ReplicaIdentity is the table's REPLICA IDENTITY as it works:
	// "default" (the primary key), "full", "index", or "none" (nothing:
	// no primary key with DEFAULT, no index with USING INDEX, or NOTHING).
	ReplicaIdentity string `json:"replica_identity"`
	// Publications are the publications that cover the table.
	Publications []Publication `json:"publications"`
	// Slots are the logical replication slots of the table's database.
	Slots []Slot `json:"replication_slots"`
}

// Publication is a publication covering the outbox table.
type Publication struct {
	Name string `json:"name" db:"name"`
	// AllTables is true for a FOR ALL TABLES publication.
	AllTables bool `json:"all_tables" db:"all_tables"`
	// Updates and Deletes say whether it publishes UPDATEs and DELETEs.
	Updates bool `json:"updates" db:"updates"`
	Deletes bool `json:"deletes" db:"deletes"`
}

// Slot is a logical replication slot of the outbox table's database
// (pg_replication_slots).
type Slot struct {
	Name   string `json:"name" db:"name"`
	Plugin string `json:"plugin" db:"plugin"`
	// Active is true while a client streams from it.
	Active bool `json:"active" db:"active"`
	// RetainedWALBytes is the WAL the server keeps for it,
	// pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn); nil on a standby
	// or when the slot has no restart_lsn (lost).
	RetainedWALBytes *int64 `json:"retained_wal_bytes" db:"retained_wal_bytes"`
}

// Problems returns what is wrong, most serious first: an *UnloggedError,
// a *SequenceBehindError, a *ReplicaIdentityError. Slots are not
// problems by themselves (see Slot.Active).
func (r *TableReport) Problems() []error {
	var out []error
	switch {
	case r.Unlogged:
		out = append(out, &UnloggedError{Table: r.Table})
	case r.UnloggedPartition != "":
		out = append(out, &UnloggedError{Table: r.Table, Partition: r.UnloggedPartition})
	case r.UnloggedSequence:
		out = append(out, &UnloggedError{Table: r.Table, Sequence: r.Sequence})
	}
	if r.Sequence != "" && r.MaxSeq > 0 && r.SequenceNext <= r.MaxSeq {
		out = append(out, &SequenceBehindError{Table: r.Table, Sequence: r.Sequence, Next: r.SequenceNext, MaxSeq: r.MaxSeq})
	}
	if err := r.replicaIdentityError(); err != nil {
		out = append(out, err)
	}
	return out
}

func (r *TableReport) replicaIdentityError() *ReplicaIdentityError {
	if r.ReplicaIdentity != "none" {
		return nil
	}
	e := &ReplicaIdentityError{Table: r.Table}
	for _, p := range r.Publications {
		if p.Updates || p.Deletes {
			e.Publications = append(e.Publications, p.Name)
			e.Updates = e.Updates || p.Updates
		}
	}
	if len(e.Publications) == 0 {
		return nil
	}
	return e
}

// Inspect reports on table: persistence, the seq sequence against the
// table's highest seq (max(seq) reads the whole table: a moment on a large
// one), replica identity, the publications covering it and the database's
// logical replication slots. Errors are wrapped as "inspect table
// <table>: ...".
func Inspect(ctx context.Context, q Querier, table string) (*TableReport, error) {
	wrap := func(err error) error { return fmt.Errorf("inspect table %s: %w", table, err) }
	r := &TableReport{Table: table, Publications: []Publication{}, Slots: []Slot{}}
	quoted := sqlname.Quote(table)
	t, err := queryOne[inspectedTable](ctx, q, inspectTableStmt.SQL, inspectTableStmt.Args(tableArgs{quoted})...)
	if err != nil {
		return nil, wrap(err)
	}
	r.Unlogged, r.Partitioned, r.Partitions = t.Unlogged, t.Partitioned, t.Partitions
	if t.UnloggedPartition != nil {
		r.UnloggedPartition = *t.UnloggedPartition
	}
	if t.Sequence != nil {
		r.Sequence = *t.Sequence
		var st sequenceState
		state, err := renderTable[sequenceArgs]("SequenceState", table, "sequence", r.Sequence)
		if err == nil {
			st, err = queryOne[sequenceState](ctx, q, state.SQL, state.Args(sequenceArgs{r.Sequence})...)
		}
		if err != nil {
			return nil, wrap(fmt.Errorf("sequence %s: %w", r.Sequence, err))
		}
		r.SequenceNext, r.UnloggedSequence = st.LastValue, st.Unlogged
		if st.IsCalled {
			r.SequenceNext++
		}
		maxSeq, err := renderTable[sqlfile.NoArgs]("MaxSeq", table)
		if err == nil {
			err = q.QueryRow(ctx, maxSeq.SQL).Scan(&r.MaxSeq)
		}
		if err != nil {
			return nil, wrap(err)
		}
	}
	if r.ReplicaIdentity, r.Publications, err = publications(ctx, q, table); err != nil {
		return nil, wrap(err)
	}
	slots, err := replicationSlots(ctx, q)
	if err != nil {
		return nil, wrap(err)
	}
	r.Slots = append(r.Slots, slots...)
	return r, nil
}

// sequenceArgs are the arguments of SequenceState: the sequence as
// regclass prints it.
type sequenceArgs struct {
	Sequence string `arg:"sequence"`
}

// inspectedTable is the row of InspectTable.
type inspectedTable struct {
	Unlogged          bool    `db:"unlogged"`
	Sequence          *string `db:"sequence"`
	UnloggedPartition *string `db:"unlogged_partition"`
	Partitioned       bool    `db:"partitioned"`
	Partitions        int     `db:"partitions"`
}

// sequenceState is the row of SequenceState.
type sequenceState struct {
	LastValue int64 `db:"last_value"`
	IsCalled  bool  `db:"is_called"`
	Unlogged  bool  `db:"unlogged"`
}

// publications returns table's replica identity as TableReport names it
// and the publications that cover it: catalog lookups only.
func publications(ctx context.Context, q Querier, table string) (string, []Publication, error) {
	quoted := sqlname.Quote(table)
	var ident string
	if err := q.QueryRow(ctx, replicaIdentityStmt.SQL, replicaIdentityStmt.Args(tableArgs{quoted})...).Scan(&ident); err != nil {
		return "", nil, err
	}
	rows, err := q.Query(ctx, publicationsStmt.SQL, publicationsStmt.Args(tableArgs{quoted})...)
	if err != nil {
		return "", nil, err
	}
	pubs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Publication])
	if err != nil {
		return "", nil, err
	}
	return ident, append([]Publication{}, pubs...), nil
}

// CheckReplicaIdentity returns a *ReplicaIdentityError when a publication
// publishes the UPDATEs or DELETEs of table while it has no usable replica
// identity (PostgreSQL then refuses them: SQLSTATE 55000); nil otherwise.
// Catalog lookups only. Other errors are the queries', wrapped as "check
// table <table>: ...".
func CheckReplicaIdentity(ctx context.Context, q Querier, table string) error {
	ident, pubs, err := publications(ctx, q, table)
	if err != nil {
		return fmt.Errorf("check table %s: %w", table, err)
	}
	r := TableReport{Table: table, ReplicaIdentity: ident, Publications: pubs}
	if e := r.replicaIdentityError(); e != nil {
		return e
	}
	return nil
}

// SlotsSQL lists the logical replication slots of the current database,
// with the WAL each retains (NULL on a standby, where
// pg_current_wal_lsn() cannot run, and for a slot without restart_lsn):
// the query Slots, rendered. A variable, as it is read from the embedded
// queries: do not change it.
var SlotsSQL = mustRender[sqlfile.NoArgs]("Slots", nil).SQL

// replicationSlots returns the logical replication slots of the current
// database (SlotsSQL).
func replicationSlots(ctx context.Context, q Querier) ([]Slot, error) {
	rows, err := q.Query(ctx, SlotsSQL)
	if err != nil {
		return nil, fmt.Errorf("replication slots: %w", err)
	}
	slots, err := pgx.CollectRows(rows, pgx.RowToStructByName[Slot])
	if err != nil {
		return nil, fmt.Errorf("replication slots: %w", err)
	}
	return slots, nil
}
