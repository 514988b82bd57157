package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/rowstate"
	"github.com/pgoutbox/outbox/internal/serde"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
	"github.com/pgoutbox/outbox/lease"
)

// pgxBeginReadOnlySnapshot reads several statements from one snapshot.
var pgxBeginReadOnlySnapshot = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// eventReport is `outbox-relay inspect`'s result; its JSON form is the
// --json output. Timestamps are UTC; absent values are null.
type eventReport struct {
	EventID string `json:"event_id"`
	Found   bool   `json:"found"`
	// State is one of lease's row states: published, dead_lettered,
	// leased, backing_off, held, claimable ("" when not found).
	State string `json:"state,omitempty"`
	// HeldBehind is, for a held event, the earlier event of its aggregate
	// it waits for; null otherwise.
	HeldBehind *blocker `json:"held_behind"`
	Published  bool     `json:"published"`
	Seq        int64    `json:"seq,omitempty"`
	// Topic is where the relay sends (or sent) the event: the row's topic
	// column, else the --topic-template route, else --topic; null when
	// none applies (the relay's --topic, not given to inspect).
	Topic *string `json:"topic"`
	// TopicSource says which gave Topic: "column", "topic-template" or
	// "topic"; null with Topic.
	TopicSource *string `json:"topic_source"`
	// AggregateType is the --column-aggregate-type value, when mapped.
	AggregateType  *string    `json:"aggregate_type,omitempty"`
	AggregateID    string     `json:"aggregate_id,omitempty"`
	EventType      string     `json:"event_type,omitempty"`
	CreatedAt      *time.Time `json:"created_at,omitempty"`
	PublishedAt    *time.Time `json:"published_at"`
	Attempts       int        `json:"attempts"`
	LastError      *string    `json:"last_error"`
	DeadLetteredAt *time.Time `json:"dead_lettered_at"`
	LockedBy       *string    `json:"locked_by"`
	// LockedUntil is a timestamp, or "infinity" for a dead letter that
	// holds back its aggregate (--on-dead-letter=hold).
	LockedUntil *string `json:"locked_until"`
	lockedUntil *time.Time
	heldForever bool
	template    string // the --topic-template that routed Topic
	tableArgs   string // the table flags, to repeat in the requeue hint
	// badIDType is the ID column's type when EventID is not a value of it
	// (e.g. not a UUID for a uuid column); "" otherwise.
	badIDType string
	// Schema is, with --value-format and --schema-registry-url, the
	// event's subject, the schema the relay encodes it in, and whether its
	// payload fits; null without them.
	Schema *schemaReport `json:"schema"`
	// CheckedAt is the database's now() when the row was read.
	CheckedAt time.Time `json:"checked_at"`
	Message   string    `json:"message,omitempty"`
	row       eventRow
}

// schemaReport is what the relay's encoder makes of an event
// (serde.Encoder.Describe).
type schemaReport struct {
	Subject string `json:"subject"`
	// Version and ID are the schema's: the subject's latest version, or
	// --schema-version; 0 when the subject has none.
	Version int `json:"version"`
	ID      int `json:"id"`
	// Fits says whether the payload encodes in it; Error says why not, or
	// why the schema could not be read.
	Fits  bool   `json:"fits"`
	Error string `json:"error,omitempty"`
}

// errEventNotFound is inspect's failure for an unknown event ID (exit 1);
// idType is the ID column's type when the ID is not a value of it.
type errEventNotFound struct{ id, table, column, idType string }

func (e errEventNotFound) Error() string {
	if e.idType != "" {
		return fmt.Sprintf("event %s is not in table %s: %q is not a %s, the type of its ID column %s (an event ID is the Kafka header event_id)", e.id, e.table, e.id, e.idType, e.column)
	}
	return fmt.Sprintf("event %s is not in table %s: it was never written, its transaction rolled back, or the retention cleaner deleted it after it was published (see `outbox-relay run --retention`, default 7 days)", e.id, e.table)
}

// queryEvent reads event id from the table tbl names, with the column
// names cols (defaults applied), and resolves its topic as the relay
// routes it.
func queryEvent(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	querier
}, tbl *tableFlags, cols lease.Columns, id string) (*eventReport, error) {
	r := &eventReport{EventID: id, tableArgs: tbl.commandArgs()}
	st, err := newInspectStatements(tbl.table, cols)
	if err != nil {
		return nil, err
	}
	var idType string
	if err := q.QueryRow(ctx, st.idColumnType.SQL, st.idColumnType.Args(idColumnTypeArgs{Table: outbox.TableIdentifier(tbl.table), Column: cols.ID})...).Scan(&idType); err != nil {
		return nil, fmt.Errorf("inspect: type of the ID column %q: %w", cols.ID, err)
	}
	if err := st.render(idType); err != nil {
		return nil, err
	}
	e, err := queryOne[eventRow](ctx, q, st.event.SQL, st.event.Args(eventArgs{ID: id})...)
	var pgErr *pgconn.PgError
	if isNoRows(err) || (errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.InvalidTextRepresentation || pgErr.Code == pgerrcode.NumericValueOutOfRange)) {
		// Not in the table, or not even of the ID column's type.
		r.CheckedAt = time.Now().UTC()
		if !isNoRows(err) {
			r.badIDType = idType
		}
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	r.Seq, r.AggregateType, r.AggregateID, r.EventType = e.Seq, e.AggregateType, e.AggregateID, e.EventType
	r.PublishedAt, r.Attempts, r.LastError, r.DeadLetteredAt = e.PublishedAt, e.Attempts, e.LastError, e.DeadLetteredAt
	r.LockedBy, r.lockedUntil, r.heldForever, r.CheckedAt = e.LockedBy, e.LockedUntil, e.HeldForever, e.CheckedAt
	r.Found, r.State, r.Published, r.row = true, e.State, e.State == rowstate.StatePublished, e
	if e.State == rowstate.StateHeld {
		if err := findBlocker(ctx, q, st, r); err != nil {
			return nil, err
		}
	}
	if topic, source := tbl.route(e.Topic, r.AggregateType); topic != "" {
		r.Topic, r.TopicSource = &topic, &source
	}
	r.template = tbl.template()
	if e.CreatedAt != nil {
		utc := e.CreatedAt.UTC()
		r.CreatedAt = &utc
	}
	r.CheckedAt = r.CheckedAt.UTC()
	for _, p := range []**time.Time{&r.PublishedAt, &r.DeadLetteredAt, &r.lockedUntil} {
		if *p != nil {
			v := (**p).UTC()
			*p = &v
		}
	}
	switch {
	case r.heldForever:
		s := "infinity"
		r.LockedUntil = &s
	case r.lockedUntil != nil:
		s := r.lockedUntil.Format(time.RFC3339Nano)
		r.LockedUntil = &s
	}
	return r, nil
}

// eventRow is the row of Event: created_at NULL when it is not a finite
// time, locked_until NULL for 'infinity' (held_forever).
type eventRow struct {
	Seq            int64      `db:"seq"`
	Topic          *string    `db:"topic"`
	AggregateType  *string    `db:"aggregate_type"`
	AggregateID    string     `db:"aggregate_id"`
	EventType      string     `db:"event_type"`
	CreatedAt      *time.Time `db:"created_at"`
	PublishedAt    *time.Time `db:"published_at"`
	Attempts       int        `db:"attempts"`
	LastError      *string    `db:"last_error"`
	DeadLetteredAt *time.Time `db:"dead_lettered_at"`
	LockedBy       *string    `db:"locked_by"`
	LockedUntil    *time.Time `db:"locked_until"`
	HeldForever    bool       `db:"held_forever"`
	CheckedAt      time.Time  `db:"checked_at"`
	State          string     `db:"state"`
	Payload        []byte     `db:"payload"`
	Headers        *string    `db:"headers"`
}

// blocker is the event a held event waits for, read by column name from
// Blocker.
type blocker struct {
	EventID string `json:"event_id" db:"event_id"`
	Seq     int64  `json:"seq" db:"seq"`
	// State is the blocker's own state: dead_lettered, leased or
	// backing_off.
	State string `json:"state" db:"state"`
	// Until is when its lease or backoff ends; null for a dead letter.
	Until          *time.Time `json:"until" db:"locked_until"`
	DeadLetteredAt *time.Time `json:"dead_lettered_at" db:"dead_lettered_at"`
}

// findBlocker fills r.HeldBehind for a held event.
func findBlocker(ctx context.Context, q querier, st *inspectStatements, r *eventReport) error {
	b, err := queryOne[blocker](ctx, q, st.blocker.SQL, st.blocker.Args(blockerArgs{AggregateID: r.AggregateID, Seq: r.Seq})...)
	if isNoRows(err) {
		return nil // it moved on between the two statements
	}
	if err != nil {
		return fmt.Errorf("inspect: the event it waits for: %w", err)
	}
	r.HeldBehind = &b
	return nil
}

var stateText = map[string]string{
	rowstate.StatePublished:    "published",
	rowstate.StateDeadLettered: "DEAD-LETTERED", // writeHuman adds the requeue command
	rowstate.StateLeased:       "not published yet: leased by a relay, being published",
	rowstate.StateBackingOff:   "not published yet: a publish failed, waiting for its retry",
	rowstate.StateHeld:         "not published yet: held back", // writeHuman says behind what
	rowstate.StateClaimable:    "not published yet: waiting to be claimed",
}

// heldText says what a held event waits for and how it moves on.
func (r *eventReport) heldText() string {
	b := r.HeldBehind
	if b == nil {
		return stateText[rowstate.StateHeld] + " behind an earlier event of its aggregate"
	}
	switch b.State {
	case rowstate.StateDeadLettered:
		since := ""
		if b.DeadLetteredAt != nil {
			since = " since " + b.DeadLetteredAt.UTC().Format(timeLayout)
		}
		return fmt.Sprintf("not published yet: held back behind dead letter %s (seq %d) of aggregate %s%s; `outbox-relay requeue %s--event-id %s` releases it",
			b.EventID, b.Seq, r.AggregateID, since, r.tableArgs, b.EventID)
	case rowstate.StateBackingOff:
		return fmt.Sprintf("not published yet: held back behind event %s (seq %d) of aggregate %s, backing off after a failed publish until %s",
			b.EventID, b.Seq, r.AggregateID, b.Until.UTC().Format(timeLayout))
	}
	return fmt.Sprintf("not published yet: held back behind event %s (seq %d) of aggregate %s, leased by a relay until %s",
		b.EventID, b.Seq, r.AggregateID, b.Until.UTC().Format(timeLayout))
}

func (r *eventReport) writeHuman(w io.Writer) {
	state := stateText[r.State]
	switch r.State {
	case rowstate.StateDeadLettered:
		state = fmt.Sprintf("DEAD-LETTERED: not published; fix the cause, then `outbox-relay requeue %s--event-id %s`", r.tableArgs, r.EventID)
	case rowstate.StateHeld:
		state = r.heldText()
	}
	fmt.Fprintf(w, "event %s: %s\n", r.EventID, state)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(timeLayout)
	}
	str := func(s *string) string {
		if s == nil || *s == "" {
			return "-"
		}
		return *s
	}
	row("topic", r.topicText())
	if r.Schema != nil {
		row("schema", r.schemaText())
	}
	row("aggregate_id", r.AggregateID)
	row("event_type", r.EventType)
	row("seq", fmt.Sprint(r.Seq))
	row("created_at", ts(r.CreatedAt))
	pub := ts(r.PublishedAt)
	if r.PublishedAt != nil && r.CreatedAt != nil {
		// Not the commit-to-publish latency: created_at is the writing
		// transaction's start and published_at the mark after Kafka's ack.
		pub += fmt.Sprintf(" (%s after created_at: from the writing transaction's start to the relay's mark, after Kafka's ack)",
			fmtSeconds(r.PublishedAt.Sub(*r.CreatedAt).Seconds()))
	}
	row("published_at", pub)
	row("attempts", fmt.Sprint(r.Attempts))
	row("last_error", strings.ReplaceAll(str(r.LastError), "\n", " "))
	row("dead_lettered_at", ts(r.DeadLetteredAt))
	row("locked_by", str(r.LockedBy))
	lu := ts(r.lockedUntil)
	switch {
	case r.heldForever:
		lu = "infinity (holds back the later events of its aggregate until requeued)"
	case r.lockedUntil != nil && r.lockedUntil.After(r.CheckedAt):
		lu += fmt.Sprintf(" (in %s)", fmtSeconds(r.lockedUntil.Sub(r.CheckedAt).Seconds()))
	}
	row("locked_until", lu)
	_ = tw.Flush()
}

// topicText is the topic line of the text output: the topic and, unless
// it is the row's own topic column, what chose it.
func (r *eventReport) topicText() string {
	switch {
	case r.Topic == nil:
		return "- (the relay's --topic; give inspect the same --topic, or --topic-template, to see it here)"
	case *r.TopicSource == topicFromTemplate:
		return fmt.Sprintf("%s (routed by --topic-template %s, aggregate type %s)", *r.Topic, r.template, *r.AggregateType)
	case *r.TopicSource == topicFromFlag:
		return *r.Topic + " (--topic: the row has no topic column value and no --topic-template route)"
	}
	return *r.Topic
}

// inspectTopicUsage is inspect's --topic usage.
const inspectTopicUsage = "the relay's --topic, to show where events go that have no topic column value and no --topic-template route"

func cmdInspect(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("inspect", stdout)
	var common commonFlags
	var tbl tableFlags
	common.register(fs)
	tbl.register(fs, inspectTopicUsage)
	eventID := fs.String("event-id", "", "the event's ID (the Kafka header event_id): a UUID, or the text of an adopted table's text or bigint ID (required)")
	var fc format.Config
	registerFormat(fs, &fc)
	asJSON := fs.Bool("json", false, "print JSON instead of text (also for an unknown ID, with found=false; the exit code is 1 then too)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *eventID == "" {
		return usagef("--event-id: required")
	}
	// The ID column may be uuid, text or bigint (adopted tables); a UUID is
	// compared in PostgreSQL's canonical text form.
	id := strings.TrimSpace(*eventID)
	if u, err := uuid.Parse(id); err == nil {
		id = u.String()
	}
	if err := tbl.validateRouting(); err != nil {
		return err
	}
	enc, err := serde.New(fc, nil)
	if err != nil {
		return usageError{errors.New(flagError(err))}
	}
	pool, cols, err := connectForCommand(ctx, &common, &tbl)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := queryEvent(ctx, pool, &tbl, cols, id)
	if err != nil {
		return err
	}
	if !r.Found {
		nf := errEventNotFound{id: id, table: tbl.table, column: cols.ID, idType: r.badIDType}
		if *asJSON {
			r.Message = nf.Error()
			if err := writeJSON(stdout, r); err != nil {
				return err
			}
		}
		return nf
	}
	if enc != nil {
		r.describeSchema(ctx, enc, fc.SubjectStrategy != format.SubjectRecord)
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	r.writeHuman(stdout)
	return nil
}

// describeSchema fills r.Schema: the subject of the event as the relay
// would publish it, its schema, and whether the payload fits. byTopic says
// the subject is named after the topic.
func (r *eventReport) describeSchema(ctx context.Context, enc *serde.Encoder, byTopic bool) {
	if byTopic && r.Topic == nil {
		r.Schema = &schemaReport{Error: "the event's topic, hence its subject, is unknown: give inspect the relay's --topic (or --topic-template)"}
		return
	}
	m := kafka.Message{Value: r.row.Payload, Headers: []kafka.Header{{Key: "event_type", Value: []byte(r.EventType)}}}
	if r.Topic != nil {
		m.Topic = *r.Topic
	}
	if r.row.Headers != nil {
		var h map[string]string
		if json.Unmarshal([]byte(*r.row.Headers), &h) == nil {
			for k, v := range h {
				if k != "event_type" {
					m.Headers = append(m.Headers, kafka.Header{Key: k, Value: []byte(v)})
				}
			}
		}
	}
	subject, s, err := enc.Describe(ctx, m)
	r.Schema = &schemaReport{Subject: subject, Fits: err == nil}
	if s != nil {
		r.Schema.Version, r.Schema.ID = s.Version, s.ID
	}
	if err != nil {
		r.Schema.Error = err.Error()
	}
}

// schemaText is the schema line of the text output.
func (r *eventReport) schemaText() string {
	s := r.Schema
	if s.Subject == "" {
		return s.Error
	}
	where := fmt.Sprintf("subject %s", s.Subject)
	if s.ID != 0 {
		where += fmt.Sprintf(", version %d, schema ID %d", s.Version, s.ID)
	}
	if s.Fits {
		return where + ": the payload fits"
	}
	// The error names the schema again at its end: said once, above.
	why := s.Error
	if i := strings.LastIndex(why, " (subject "); i > 0 && s.ID != 0 {
		why = why[:i]
	}
	return where + ": " + why
}
