package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
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
	// State is one of published, dead_lettered, leased, backing_off,
	// pending ("" when not found).
	State          string     `json:"state,omitempty"`
	Published      bool       `json:"published"`
	Seq            int64      `json:"seq,omitempty"`
	Topic          *string    `json:"topic"`
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
	// CheckedAt is the database's now() when the row was read.
	CheckedAt time.Time `json:"checked_at"`
	Message   string    `json:"message,omitempty"`
}

func inspectSQL(t string, cols lease.Columns) string {
	id := func(c string) string { return pgx.Identifier{c}.Sanitize() }
	return `SELECT seq, topic, ` + id(cols.AggregateID) + `::text, ` + id(cols.EventType) + `::text, created_at, published_at, attempts, last_error,
  dead_lettered_at, locked_by, NULLIF(locked_until, 'infinity'), coalesce(locked_until = 'infinity', false), now(),
  CASE
    WHEN published_at IS NOT NULL THEN 'published'
    WHEN dead_lettered_at IS NOT NULL THEN 'dead_lettered'
    WHEN locked_by IS NOT NULL AND locked_until > now() THEN 'leased'
    WHEN locked_by IS NULL AND locked_until > now() THEN 'backing_off'
    ELSE 'pending'
  END
FROM ` + t + ` WHERE ` + id(cols.ID) + ` = $1`
}

// errEventNotFound is inspect's failure for an unknown event ID (exit 1).
type errEventNotFound struct{ id, table string }

func (e errEventNotFound) Error() string {
	return fmt.Sprintf("event %s is not in table %s: it was never written, its transaction rolled back, or the retention cleaner deleted it after it was published (see `outbox-relay run --retention`, default 7 days)", e.id, e.table)
}

func queryEvent(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string, cols lease.Columns, id uuid.UUID) (*eventReport, error) {
	r := &eventReport{EventID: id.String()}
	var (
		created time.Time
		state   string
	)
	err := q.QueryRow(ctx, inspectSQL(outbox.TableIdentifier(table), cols), id).Scan(&r.Seq, &r.Topic, &r.AggregateID, &r.EventType,
		&created, &r.PublishedAt, &r.Attempts, &r.LastError, &r.DeadLetteredAt, &r.LockedBy, &r.lockedUntil, &r.heldForever, &r.CheckedAt, &state)
	if isNoRows(err) {
		r.CheckedAt = time.Now().UTC()
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	r.Found, r.State, r.Published = true, state, state == "published"
	created = created.UTC()
	r.CreatedAt = &created
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

var stateText = map[string]string{
	"published":     "published",
	"dead_lettered": "DEAD-LETTERED: not published; fix the cause, then `outbox-relay requeue --event-id`",
	"leased":        "not published yet: leased by a relay, being published",
	"backing_off":   "not published yet: a publish failed, waiting for its retry",
	"pending":       "not published yet: waiting to be claimed",
}

func (r *eventReport) writeHuman(w io.Writer) {
	fmt.Fprintf(w, "event %s: %s\n", r.EventID, stateText[r.State])
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
	topic := str(r.Topic)
	if r.Topic == nil {
		topic = "- (the relay's --topic)"
	}
	row("topic", topic)
	row("aggregate_id", r.AggregateID)
	row("event_type", r.EventType)
	row("seq", fmt.Sprint(r.Seq))
	row("created_at", ts(r.CreatedAt))
	pub := ts(r.PublishedAt)
	if r.PublishedAt != nil {
		pub += fmt.Sprintf(" (%s after created_at)", fmtSeconds(r.PublishedAt.Sub(*r.CreatedAt).Seconds()))
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

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", stderr)
	var common commonFlags
	var cf columnFlags
	common.register(fs)
	cf.register(fs)
	eventID := fs.String("event-id", "", "the event's ID (the Kafka header event_id), a UUID (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of text (also for an unknown ID, with found=false; the exit code is 1 then too)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *eventID == "" {
		return usagef("--event-id: required")
	}
	id, err := uuid.Parse(strings.TrimSpace(*eventID))
	if err != nil {
		return usagef("--event-id: %q is not a UUID", *eventID)
	}
	pool, cols, err := connectForCommand(ctx, &common, &cf)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := queryEvent(ctx, pool, common.table, cols, id)
	if err != nil {
		return err
	}
	if !r.Found {
		nf := errEventNotFound{id: id.String(), table: common.table}
		if *asJSON {
			r.Message = nf.Error()
			if err := writeJSON(stdout, r); err != nil {
				return err
			}
		}
		return nf
	}
	if *asJSON {
		return writeJSON(stdout, r)
	}
	r.writeHuman(stdout)
	return nil
}
