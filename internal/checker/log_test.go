package checker

import (
	"testing"

	"github.com/google/uuid"
)

// LogOrder allows replays of runs of events (at-least-once) and counts a
// late copy after later events, followed by later ones or at the end.
func TestLogOrder(t *testing.T) {
	var exp []Expected
	for i := range 6 {
		exp = append(exp, Expected{ID: uuid.New(), AggregateID: "a", Seq: int64(10 + i)})
	}
	log := func(idx ...int) []Observed {
		var out []Observed
		for off, i := range idx {
			out = append(out, Observed{EventID: exp[i].ID.String(), Key: "a", Offset: int64(off)})
		}
		return out
	}
	for _, c := range []struct {
		idx  []int
		want int
	}{
		{[]int{0, 1, 2, 3, 4, 5}, 0},
		{[]int{0, 1, 2, 1, 2, 3, 4, 5}, 0},       // a replay from event 1
		{[]int{0, 1, 2, 3, 4, 5, 3, 4, 5}, 0},    // a replay at the end
		{[]int{0, 1, 2, 3, 4, 1, 2, 5}, 1},       // a late copy of 1-2 after 4, then 5: a skip
		{[]int{0, 1, 2, 3, 4, 5, 1, 2}, 1},       // a late copy at the end: the last value is wrong
		{[]int{0, 2, 1, 3, 4, 5}, 2},             // 2 before 1 (a skip), then 3 after 1 (another)
		{[]int{0, 1, 2, 3, 4, 5, 2, 3, 1, 2}, 1}, // ends on 2
	} {
		if n, ex := LogOrder(exp, log(c.idx...)); n != c.want {
			t.Errorf("log %v: %d violations %v, want %d", c.idx, n, ex, c.want)
		}
	}
}
