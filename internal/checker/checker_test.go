package checker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// world is a synthetic run: events of a few aggregates, each aggregate on
// its own partition, delivered exactly once in order.
func world(n, aggregates int) ([]Expected, []Observed) {
	var exp []Expected
	var obs []Observed
	offsets := map[int32]int64{}
	for i := 0; i < n; i++ {
		agg := fmt.Sprintf("agg-%d", i%aggregates)
		e := Expected{ID: uuid.New(), AggregateID: agg, Payload: []byte(fmt.Sprintf(`{"n": %d, "agg": %q}`, i, agg)), Seq: int64(i + 1)}
		exp = append(exp, e)
		p := int32(i % aggregates)
		obs = append(obs, Observed{EventID: e.ID.String(), Key: agg, Value: []byte(fmt.Sprintf(`{"agg":%q,"n":%d}`, agg, i)), Partition: p, Offset: offsets[p]})
		offsets[p]++
	}
	return exp, obs
}

func TestCleanRunIsOK(t *testing.T) {
	exp, obs := world(100, 7)
	// Observation order across partitions does not matter.
	for i, j := 0, len(obs)-1; i < j; i, j = i+1, j-1 {
		obs[i], obs[j] = obs[j], obs[i]
	}
	r := Check(exp, obs)
	if !r.OK() || r.Committed != 100 || r.Delivered != 100 || r.Duplicates != 0 || len(r.Examples) != 0 {
		t.Fatalf("clean run: %v", r)
	}
}

func TestLost(t *testing.T) {
	exp, obs := world(20, 3)
	obs = append(obs[:5], obs[6:]...)
	r := Check(exp, obs)
	if r.OK() || r.Lost != 1 || r.Delivered != 19 || !strings.Contains(r.String(), "lost: event "+exp[5].ID.String()) {
		t.Fatalf("one lost: %v", r)
	}
}

func TestDuplicatesAreOK(t *testing.T) {
	exp, obs := world(20, 3)
	// A redelivery of event 4 after later events of its aggregate: the
	// first appearance still counts for order.
	dup := obs[4]
	dup.Offset = 1000
	obs = append(obs, dup, dup)
	r := Check(exp, obs)
	if !r.OK() || r.Duplicates != 2 || r.Delivered != 20 {
		t.Fatalf("duplicates: %v", r)
	}
}

func TestOrderViolation(t *testing.T) {
	exp, obs := world(20, 2)
	// Events 0 and 2 are aggregate agg-0's first two, both on partition 0
	// at offsets 0 and 1: swap their offsets.
	obs[0].Offset, obs[2].Offset = obs[2].Offset, obs[0].Offset
	r := Check(exp, obs)
	if r.OK() || r.OrderViolations != 1 || r.Lost != 0 || !strings.Contains(r.String(), "order: aggregate \"agg-0\"") {
		t.Fatalf("swapped: %v", r)
	}
}

func TestOrderViolationAcrossPartitions(t *testing.T) {
	exp, obs := world(20, 2)
	obs[2].Partition = 1
	obs[2].Offset = 999
	if r := Check(exp, obs); r.OrderViolations != 1 {
		t.Fatalf("aggregate split over partitions: %v", r)
	}
}

func TestLaterDuplicateIsNotAnOrderViolation(t *testing.T) {
	exp, obs := world(6, 1)
	// Appearances: 0 1 2 1 3 4 5 (a relay re-published 1 after 2).
	dup := obs[1]
	for i := 2; i < len(obs); i++ {
		obs[i].Offset++
	}
	dup.Offset = 3
	obs = append(obs, dup)
	if r := Check(exp, obs); !r.OK() || r.Duplicates != 1 {
		t.Fatalf("redelivery: %v", r)
	}
}

func TestPhantom(t *testing.T) {
	exp, obs := world(10, 2)
	ghost := uuid.New().String()
	obs = append(obs,
		Observed{EventID: ghost, Key: "agg-0", Value: []byte(`{}`), Partition: 0, Offset: 100},
		Observed{EventID: ghost, Key: "agg-0", Value: []byte(`{}`), Partition: 0, Offset: 101},
		Observed{EventID: "", Key: "x", Partition: 1, Offset: 100},
		Observed{EventID: "not-a-uuid", Key: "x", Partition: 1, Offset: 101})
	r := Check(exp, obs)
	if r.OK() || r.Phantoms != 3 || r.Lost != 0 || !strings.Contains(r.String(), "phantom: event "+ghost) {
		t.Fatalf("phantoms: %v", r)
	}
}

func TestPayloadMismatch(t *testing.T) {
	exp, obs := world(10, 2)
	obs[3].Value = []byte(`{"agg":"agg-1","n":4}`)
	obs[4].Key = "wrong"
	r := Check(exp, obs)
	if r.OK() || r.PayloadMismatches != 2 || r.Delivered != 10 {
		t.Fatalf("mismatch: %v", r)
	}
}

func TestJSONEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		eq   bool
	}{
		{`{"a":1,"b":[1,2]}`, `{ "b" : [1, 2], "a" : 1 }`, true},
		{`1.50`, `1.5`, true},
		{`15e-1`, `1.5`, true},
		{`123456789012345678901234567890`, `123456789012345678901234567890`, true},
		{`123456789012345678901234567890`, `123456789012345678901234567891`, false},
		{`null`, ``, true},
		{`"x"`, `"y"`, false},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
		{`{"a":1}`, `{"a":1} x`, false},
		{`1e100000`, `1e100000`, true},
	} {
		if got := jsonEqual([]byte(c.a), []byte(c.b)); got != c.eq {
			t.Errorf("jsonEqual(%s, %s) = %v, want %v", c.a, c.b, got, c.eq)
		}
	}
	exp := []Expected{{ID: uuid.New(), AggregateID: "a", Payload: nil, Seq: 1}}
	if r := Check(exp, []Observed{{EventID: exp[0].ID.String(), Key: "a", Value: nil}}); !r.OK() {
		t.Fatalf("SQL NULL payload published as a null value: %v", r)
	}
}

func TestExamplesAreBounded(t *testing.T) {
	exp, _ := world(100, 3)
	r := Check(exp, nil)
	if r.Lost != 100 || len(r.Examples) != maxExamples {
		t.Fatalf("all lost: lost=%d examples=%d", r.Lost, len(r.Examples))
	}
}
