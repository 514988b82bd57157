package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/lease"
)

// statusReport is `outbox-relay status`'s result; its JSON form is the
// --json output.
type statusReport struct {
	Table     string    `json:"table"`
	CheckedAt time.Time `json:"checked_at"`
	// OldestUnpublishedAgeSeconds is the age of the lowest-seq unpublished
	// event that is not dead-lettered (0 when none), by the database clock.
	OldestUnpublishedAgeSeconds float64    `json:"oldest_unpublished_age_seconds"`
	OldestUnpublishedCreatedAt  *time.Time `json:"oldest_unpublished_created_at"`
	OldestUnpublishedEventID    *string    `json:"oldest_unpublished_event_id"`
	Unpublished                 struct {
		Total      int64 `json:"total"`
		Claimable  int64 `json:"claimable"`
		Held       int64 `json:"held"`
		Leased     int64 `json:"leased"`
		BackingOff int64 `json:"backing_off"`
	} `json:"unpublished"`
	DeadLetters int64 `json:"dead_letters"`
	// DeadLettersSchema counts the dead letters whose payload did not fit
	// their Schema Registry schema (--value-format avro, protobuf or
	// json-schema).
	DeadLettersSchema int64         `json:"dead_letters_schema"`
	Published         int64         `json:"published"`
	OldestPublishedAt *time.Time    `json:"oldest_published_at"`
	NewestPublishedAt *time.Time    `json:"newest_published_at"`
	Relays            []relayLeases `json:"relays"`
	// KeyPartitions says which relay owns which key partitions, and since
	// when.
	KeyPartitions *claim.Owners `json:"key_partitions"`
	// KeyPartitionsSettled is claim.Owners.Settled: every partition is
	// with the live relay the assignment gives it (false while relays
	// join, leave or hand partitions over).
	KeyPartitionsSettled bool `json:"key_partitions_settled"`
	// Problems are what is wrong with the table, each with its fix
	// (sqladmin.TableReport.Problems): UNLOGGED, a sequence behind the
	// table's seqs, UPDATEs failing for want of a replica identity.
	Problems []string `json:"problems"`
	// ReplicationSlots are the database's logical replication slots and
	// Publications those covering the table (a Debezium installation's
	// leftovers, say).
	ReplicationSlots []sqladmin.Slot        `json:"replication_slots"`
	Publications     []sqladmin.Publication `json:"publications"`
	// TimePartitions is, on a partitioned table, its partitions in the
	// order of their ranges (DEFAULT last); TimePartitioning what migrate
	// --time-partitioned recorded (zero when the relays do not keep them).
	TimePartitions   []sqladmin.TimePartition  `json:"time_partitions,omitempty"`
	TimePartitioning sqladmin.TimePartitioning `json:"time_partitioning"`
	tableArgs        string                    // the table flags, to repeat in hints
	inspected        *sqladmin.TableReport
}

// relayLeases is one relay holding leases.
type relayLeases struct {
	RelayID     string    `json:"relay_id" db:"relay_id"`
	Leased      int64     `json:"leased" db:"leased"`
	LeaseEndsAt time.Time `json:"lease_ends_at" db:"lease_ends_at"`
}

// statusCounts is the row of StatusCounts.
type statusCounts struct {
	CheckedAt         time.Time  `db:"checked_at"`
	Unpublished       int64      `db:"unpublished"`
	Claimable         int64      `db:"claimable"`
	Held              int64      `db:"held"`
	Leased            int64      `db:"leased"`
	BackingOff        int64      `db:"backing_off"`
	DeadLetters       int64      `db:"dead_letters"`
	DeadLettersSchema int64      `db:"dead_letters_schema"`
	Published         int64      `db:"published"`
	OldestPublishedAt *time.Time `db:"oldest_published_at"`
	NewestPublishedAt *time.Time `db:"newest_published_at"`
}

// oldestUnpublished is the row of OldestUnpublished; created_at and the
// age are NULL for a created_at of ±infinity.
type oldestUnpublished struct {
	CreatedAt  *time.Time `db:"created_at"`
	EventID    string     `db:"event_id"`
	AgeSeconds *float64   `db:"age_seconds"`
}

// queryOne runs a statement that returns one row and reads it into a T by
// column name (pgx.RowToStructByName: T's fields are tagged
// `db:"column"`; a column without a field, or a field without a column,
// is an error). No row is pgx.ErrNoRows, as from QueryRow.
func queryOne[T any](ctx context.Context, q querier, sql string, args ...any) (T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
}

// querier is what queryOne needs of a pool, a connection or a
// transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryStatus reads the status of table in one repeatable-read snapshot.
func queryStatus(ctx context.Context, pool *pgxpool.Pool, table string, cols lease.Columns) (*statusReport, error) {
	st, err := newStatusStatements(table, cols)
	if err != nil {
		return nil, err
	}
	tx, err := pool.BeginTx(ctx, pgxBeginReadOnlySnapshot)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r := &statusReport{Table: table, Relays: []relayLeases{}}
	c, err := queryOne[statusCounts](ctx, tx, st.counts.SQL)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	u := &r.Unpublished
	r.CheckedAt, u.Total, u.Claimable, u.Held, u.Leased, u.BackingOff = c.CheckedAt.UTC(), c.Unpublished, c.Claimable, c.Held, c.Leased, c.BackingOff
	r.DeadLetters, r.Published, r.OldestPublishedAt, r.NewestPublishedAt = c.DeadLetters, c.Published, c.OldestPublishedAt, c.NewestPublishedAt
	r.DeadLettersSchema = c.DeadLettersSchema
	switch o, err := queryOne[oldestUnpublished](ctx, tx, st.oldest.SQL); {
	case err == nil:
		r.OldestUnpublishedEventID = &o.EventID
		if o.CreatedAt != nil && o.AgeSeconds != nil {
			utc := o.CreatedAt.UTC()
			r.OldestUnpublishedCreatedAt, r.OldestUnpublishedAgeSeconds = &utc, *o.AgeSeconds
		}
	case isNoRows(err):
	default:
		return nil, fmt.Errorf("status: oldest unpublished: %w", err)
	}
	rows, err := tx.Query(ctx, st.relays.SQL)
	if err != nil {
		return nil, fmt.Errorf("status: relays: %w", err)
	}
	if r.Relays, err = pgx.AppendRows(r.Relays, rows, pgx.RowToStructByName[relayLeases]); err != nil {
		return nil, fmt.Errorf("status: relays: %w", err)
	}
	for i := range r.Relays {
		r.Relays[i].LeaseEndsAt = r.Relays[i].LeaseEndsAt.UTC()
	}
	ins, err := sqladmin.Inspect(ctx, tx, table)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	r.inspected, r.Problems, r.ReplicationSlots, r.Publications = ins, []string{}, ins.Slots, ins.Publications
	for _, p := range ins.Problems() {
		r.Problems = append(r.Problems, p.Error())
	}
	for _, p := range []**time.Time{&r.OldestPublishedAt, &r.NewestPublishedAt} {
		if *p != nil {
			v := (**p).UTC()
			*p = &v
		}
	}
	if ins.Partitioned {
		if r.TimePartitions, err = sqladmin.ListTimePartitions(ctx, tx, table); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		if r.TimePartitioning, err = sqladmin.ReadTimePartitioning(ctx, tx, table); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
	}
	if r.KeyPartitions, err = claim.ReadOwners(ctx, tx, table); err == nil {
		r.KeyPartitionsSettled = r.KeyPartitions.Settled()
	}
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return r, nil
}

// ranges prints partitions as "0-3,7,9-12".
func ranges(ps []int) string {
	var b []byte
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", ps[i])
		if j > i {
			b = fmt.Appendf(b, "-%d", ps[j])
		}
		i = j + 1
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// writeOwners prints who owns the key partitions.
func (r *statusReport) writeOwners(w io.Writer) {
	o := r.KeyPartitions
	if o == nil {
		return
	}
	live, silent := 0, 0
	for _, m := range o.Relays {
		if m.Live {
			live++
		}
		if _, ok := silentFor(m, r.CheckedAt); ok {
			silent++
		}
	}
	state := "settled: every partition is with the relay the assignment gives it"
	switch {
	case live == 0:
		state = "no relay running"
	case !r.KeyPartitionsSettled:
		state = "rebalancing: partitions are being handed over"
	}
	if silent > 0 {
		state += fmt.Sprintf("; %d of them silent, missing their renewals (stopped, killed or cut off from the database?): "+
			"their partitions' events wait until their membership runs out", silent)
	}
	fmt.Fprintf(w, "\nkey partitions: %d, %d relay(s) running, %s\n", o.Partitions, live, state)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RELAY\tOWNS\tSINCE\tMEMBERSHIP\tPARTITIONS")
	for _, m := range o.Relays {
		since := "-"
		if !m.Since.IsZero() {
			since = m.Since.UTC().Format(timeLayout)
		}
		state := fmt.Sprintf("ends in %s", fmtSeconds(m.Until.Sub(r.CheckedAt).Seconds()))
		if d, ok := silentFor(m, r.CheckedAt); ok {
			state += fmt.Sprintf(", silent for %s (renews every %s)", fmtSeconds(d.Seconds()), fmtSeconds(m.Until.Sub(m.RenewedAt).Seconds()/renewEvery))
		}
		if !m.Live {
			state = fmt.Sprintf("ran out %s ago (its partitions are free)", fmtSeconds(r.CheckedAt.Sub(m.Until).Seconds()))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", m.Member, len(m.Owned), since, state, ranges(m.Owned))
	}
	fmt.Fprintf(tw, "  (nobody)\t%d\t\t\t%s\n", len(o.Free), ranges(o.Free))
	_ = tw.Flush()
}

const timeLayout = "2006-01-02 15:04:05.000000Z07:00"

// renewEvery is how often a relay renews its membership, as a fraction of
// its lease (the membership's until minus its last renewal), as the
// claimer does.
const renewEvery = 6

// silentFor returns how long ago live member m last renewed its
// membership, and whether that is more than two renewals and a second
// ago: a relay that stopped without leaving (SIGKILL, a frozen process,
// a cut connection) still owns its partitions until the membership runs
// out, and their events wait meanwhile.
func silentFor(m claim.MemberOwnership, now time.Time) (time.Duration, bool) {
	lease := m.Until.Sub(m.RenewedAt)
	d := now.Sub(m.RenewedAt)
	return d, m.Live && lease > 0 && d > 2*lease/renewEvery+time.Second
}

func (r *statusReport) writeHuman(w io.Writer) {
	fmt.Fprintf(w, "outbox table %s at %s\n\n", r.Table, r.CheckedAt.Format(timeLayout))
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "problems:")
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		fmt.Fprintln(w)
	}
	defer func() {
		if r.inspected != nil && (len(r.ReplicationSlots) > 0 || len(r.Publications) > 0) {
			fmt.Fprintln(w)
			writeLeftovers(w, r.inspected)
		}
	}()
	switch {
	case r.OldestUnpublishedCreatedAt != nil:
		fmt.Fprintf(w, "oldest unpublished event: %s old (event_id %s, created_at %s)\n",
			fmtSeconds(r.OldestUnpublishedAgeSeconds), *r.OldestUnpublishedEventID, r.OldestUnpublishedCreatedAt.Format(timeLayout))
	case r.OldestUnpublishedEventID != nil:
		fmt.Fprintf(w, "oldest unpublished event: event_id %s, whose created_at is not a finite time (the relay dead-letters it)\n", *r.OldestUnpublishedEventID)
	default:
		fmt.Fprintln(w, "oldest unpublished event: none (every event is published or dead-lettered)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "unpublished\t%d\tnot dead-lettered\n", r.Unpublished.Total)
	fmt.Fprintf(tw, "  claimable\t%d\tthe next claim may take it\n", r.Unpublished.Claimable)
	fmt.Fprintf(tw, "  held back\t%d\twaits behind an earlier event of its aggregate (leased, backing off or dead-lettered; see inspect)\n", r.Unpublished.Held)
	fmt.Fprintf(tw, "  leased\t%d\theld by a relay, being published\n", r.Unpublished.Leased)
	fmt.Fprintf(tw, "  backing off\t%d\tfailed, waiting for its retry\n", r.Unpublished.BackingOff)
	hint := ""
	if r.DeadLetters > 0 {
		hint = fmt.Sprintf("see `outbox-relay inspect %[1]s--event-id ID`, then `outbox-relay requeue %[1]s--event-id ID`", r.tableArgs)
	}
	fmt.Fprintf(tw, "dead letters\t%d\t%s\n", r.DeadLetters, hint)
	if r.DeadLettersSchema > 0 {
		fmt.Fprintf(tw, "  schema faults\t%d\tthe payload did not fit its Schema Registry schema (last_error names the field); fix the payload or register a version it fits, then requeue\n", r.DeadLettersSchema)
	}
	kept := ""
	if r.OldestPublishedAt != nil {
		kept = fmt.Sprintf("published from %s to %s", r.OldestPublishedAt.Format(timeLayout), r.NewestPublishedAt.Format(timeLayout))
	}
	fmt.Fprintf(tw, "published (kept)\t%d\t%s\n", r.Published, kept)
	_ = tw.Flush()
	r.writeTimePartitions(w)
	fmt.Fprintln(w)
	defer r.writeOwners(w)
	if len(r.Relays) == 0 {
		fmt.Fprintln(w, "relays holding leases: none")
		return
	}
	fmt.Fprintln(w, "relays holding leases:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RELAY\tLEASED\tLEASE ENDS")
	for _, l := range r.Relays {
		fmt.Fprintf(tw, "  %s\t%d\t%s (in %s)\n", l.RelayID, l.Leased, l.LeaseEndsAt.Format(timeLayout),
			fmtSeconds(l.LeaseEndsAt.Sub(r.CheckedAt).Seconds()))
	}
	_ = tw.Flush()
}

// writeTimePartitions prints a partitioned table's partitions in one
// line: how many, the range they cover, who keeps them.
func (r *statusReport) writeTimePartitions(w io.Writer) {
	if len(r.TimePartitions) == 0 {
		return
	}
	var from, to time.Time
	def := ""
	n := 0
	for _, p := range r.TimePartitions {
		switch {
		case p.Default:
			def = ", and a DEFAULT partition"
			continue
		case from.IsZero() || p.From.Before(from):
			from = p.From
		}
		if p.To.After(to) {
			to = p.To
		}
		n++
	}
	kept := "kept by their owner (not migrate --time-partitioned)"
	if tp := r.TimePartitioning; tp.Interval > 0 {
		every := tp.Interval.String()
		if tp.Interval%time.Hour == 0 {
			every = fmt.Sprintf("%dh", tp.Interval/time.Hour)
		}
		kept = fmt.Sprintf("one per %s, %d ahead kept created by the relays", every, tp.Ahead)
	}
	fmt.Fprintf(w, "\ntime partitions: %d", n)
	if n > 0 {
		fmt.Fprintf(w, " from %s to %s", from.UTC().Format(timeLayout), to.UTC().Format(timeLayout))
	}
	fmt.Fprintf(w, "%s; %s\n", def, kept)
}

// fmtSeconds prints seconds as a rounded duration, e.g. 2.35s, 4m12s.
func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdStatus(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("status", stdout)
	var common commonFlags
	var tbl tableFlags
	common.register(fs)
	tbl.register(fs, "")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	pool, cols, err := connectForCommand(ctx, &common, &tbl)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := queryStatus(ctx, pool, tbl.table, cols)
	if err != nil {
		return err
	}
	r.tableArgs = tbl.commandArgs()
	if *asJSON {
		return writeJSON(stdout, r)
	}
	r.writeHuman(stdout)
	return nil
}

// connectForCommand opens a small pool for a one-shot command, checks
// that the outbox table is there with the columns tbl maps (--debezium,
// --column-*), and returns the column names with defaults applied.
func connectForCommand(ctx context.Context, common *commonFlags, tbl *tableFlags) (*pgxpool.Pool, lease.Columns, error) {
	lc := lease.Config{Table: tbl.table, Columns: tbl.columns()}.WithDefaults()
	if err := lc.Validate(); err != nil {
		return nil, lease.Columns{}, usageError{errors.New(flagError(err))}
	}
	pcfg, err := common.poolConfig()
	if err != nil {
		return nil, lease.Columns{}, err
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, lease.Columns{}, fmt.Errorf("connect: %w", err)
	}
	if err := checkTable(ctx, pool, tbl.table, lc.Columns); err != nil {
		pool.Close()
		return nil, lease.Columns{}, err
	}
	return pool, lc.Columns, nil
}
