package exampletb

import (
	"strings"
	"testing"
)

func TestDoneRunsCleanupsLastFirstAndFailuresPanic(t *testing.T) {
	tb := New("ExampleX")
	var order []int
	tb.Cleanup(func() { order = append(order, 1) })
	tb.Cleanup(func() { order = append(order, 2) })
	tb.Done()
	tb.Done() // once
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Fatalf("cleanups ran in order %v, want [2 1]", order)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "ExampleX: no database: 42") {
			t.Fatalf("Fatalf recovered %v, want a panic with its message", r)
		}
	}()
	tb.Fatalf("no database: %d", 42)
}
