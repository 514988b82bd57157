// Package checker verifies an outbox run end to end: it compares the events
// committed to the outbox table with the records found on Kafka and reports
// lost events, duplicates, per-aggregate order violations, phantoms (records
// of events that were never committed, e.g. from a rolled-back transaction)
// and payload mismatches. The fault tests (internal/faults) and the soak
// (bench/cmd/outbox-soak) share it.
package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// maxExamples bounds Report.Examples.
const maxExamples = 10

// Expected is one committed event as the writer (or the table) saw it.
type Expected struct {
	ID          uuid.UUID
	AggregateID string
	// Payload is the event's JSON payload; nil means SQL NULL, which the
	// relay publishes as a null value.
	Payload []byte
	// Seq is the insert order (the table's seq column).
	Seq int64
}

// Observed is one record read from Kafka.
type Observed struct {
	// EventID is the record's event_id header ("" if it had none).
	EventID   string
	Key       string
	Value     []byte
	Partition int32
	Offset    int64
	// ReceivedAt is when the consumer received the record.
	ReceivedAt time.Time
}

// Report is the outcome of Check.
type Report struct {
	// Committed is the number of expected (committed) events.
	Committed int
	// Delivered is the number of committed events seen at least once.
	Delivered int
	// Lost is the number of committed events never seen.
	Lost int
	// Duplicates is the number of extra copies of committed events.
	Duplicates int
	// OrderViolations is the number of committed events whose first
	// appearance comes after the first appearance of a later event of the
	// same aggregate (or that landed on another partition than the
	// aggregate's first event).
	OrderViolations int
	// Phantoms is the number of distinct event IDs on Kafka that were never
	// committed (records without an event_id header count one each).
	Phantoms int
	// PayloadMismatches is the number of records of committed events whose
	// value is not JSON-equal to the committed payload, or whose key is not
	// the event's aggregate ID.
	PayloadMismatches int
	// Examples describes a few of the problems found, for humans.
	Examples []string
}

// OK reports whether nothing was lost, reordered, invented or altered.
// Duplicates are allowed (delivery is at least once).
func (r Report) OK() bool {
	return r.Lost == 0 && r.OrderViolations == 0 && r.Phantoms == 0 && r.PayloadMismatches == 0
}

// String is a one-line summary followed by the examples, one per line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "committed=%d delivered=%d lost=%d duplicates=%d order_violations=%d phantoms=%d payload_mismatches=%d",
		r.Committed, r.Delivered, r.Lost, r.Duplicates, r.OrderViolations, r.Phantoms, r.PayloadMismatches)
	for _, e := range r.Examples {
		b.WriteString("\n  ")
		b.WriteString(e)
	}
	return b.String()
}

func (r *Report) example(format string, args ...any) {
	if len(r.Examples) < maxExamples {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Check compares the committed events with the records observed on Kafka.
// observed may be in any order; records are ordered by (partition, offset)
// for the order check.
func Check(expected []Expected, observed []Observed) Report {
	r := Report{Committed: len(expected)}

	byID := make(map[uuid.UUID]int, len(expected))
	for i, e := range expected {
		byID[e.ID] = i
	}

	obs := make([]Observed, len(observed))
	copy(obs, observed)
	sort.SliceStable(obs, func(i, j int) bool {
		if obs[i].Partition != obs[j].Partition {
			return obs[i].Partition < obs[j].Partition
		}
		return obs[i].Offset < obs[j].Offset
	})

	seen := make([]int, len(expected))
	phantoms := map[string]bool{}
	// Per aggregate: the partition of its first record and the highest seq
	// among its first appearances so far.
	type aggState struct {
		partition int32
		maxSeq    int64
		maxID     uuid.UUID
	}
	aggs := map[string]*aggState{}

	for _, o := range obs {
		id, err := uuid.Parse(o.EventID)
		i, ok := byID[id]
		if err != nil || !ok {
			if o.EventID == "" {
				r.Phantoms++
				r.example("phantom: record without event_id header at partition %d offset %d", o.Partition, o.Offset)
			} else if !phantoms[o.EventID] {
				phantoms[o.EventID] = true
				r.Phantoms++
				r.example("phantom: event %s (partition %d offset %d) was never committed", o.EventID, o.Partition, o.Offset)
			}
			continue
		}
		e := expected[i]
		if o.Key != e.AggregateID {
			r.PayloadMismatches++
			r.example("key mismatch: event %s has key %q, want aggregate %q", e.ID, o.Key, e.AggregateID)
		} else if !jsonEqual(e.Payload, o.Value) {
			r.PayloadMismatches++
			r.example("payload mismatch: event %s: got %s, want %s", e.ID, abbrev(o.Value), abbrev(e.Payload))
		}
		seen[i]++
		if seen[i] > 1 {
			r.Duplicates++
			continue
		}
		// First appearance.
		st := aggs[e.AggregateID]
		if st == nil {
			aggs[e.AggregateID] = &aggState{partition: o.Partition, maxSeq: e.Seq, maxID: e.ID}
			continue
		}
		if o.Partition != st.partition {
			r.OrderViolations++
			r.example("order: aggregate %q: event %s on partition %d, earlier events on partition %d", e.AggregateID, e.ID, o.Partition, st.partition)
			continue
		}
		if e.Seq < st.maxSeq {
			r.OrderViolations++
			r.example("order: aggregate %q: event %s (seq %d) first appeared at offset %d, after event %s (seq %d)",
				e.AggregateID, e.ID, e.Seq, o.Offset, st.maxID, st.maxSeq)
			continue
		}
		st.maxSeq, st.maxID = e.Seq, e.ID
	}

	for i, n := range seen {
		if n > 0 {
			r.Delivered++
		} else {
			r.Lost++
			r.example("lost: event %s (aggregate %q, seq %d) never appeared", expected[i].ID, expected[i].AggregateID, expected[i].Seq)
		}
	}
	return r
}

// jsonEqual reports whether a and b are the same JSON value (object key
// order, whitespace and number spelling aside: numbers compare by their
// decimal text after normalization by encoding/json's Number). Empty or nil
// input is JSON null.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, errA := decode(a)
	vb, errB := decode(b)
	if errA != nil || errB != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func decode(b []byte) (any, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return normalize(v), nil
}

// normalize rewrites json.Number values to a canonical text so that 1.0,
// 1 and 1e0 compare equal when they denote the same number exactly (jsonb
// keeps numeric text, but a consumer should not care).
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	case json.Number:
		return canonicalNumber(string(x))
	}
	return v
}

func abbrev(b []byte) string {
	if b == nil {
		return "<nil>"
	}
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// canonicalNumber returns the exact rational value of a JSON number as text
// ("1.50" and "15e-1" both become "3/2"); numbers with huge exponents are
// compared by their text.
func canonicalNumber(s string) string {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || exp > 10000 || exp < -10000 {
			return s
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	return r.RatString()
}
