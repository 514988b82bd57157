package relay

import (
	"sync"
	"testing"
)

// TestShared: update runs one f at a time; a change closes the channel
// returned before it, a read-only update closes nothing.
func TestShared(t *testing.T) {
	s := newShared(0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				s.update(func(n *int) bool { *n++; return true })
			}
		}()
	}
	wg.Wait()
	var n int
	before := s.update(func(v *int) bool { n = *v; return false })
	if n != 8000 {
		t.Fatalf("8 goroutines × 1000 increments = %d", n)
	}
	if drain(before) {
		t.Fatal("a read-only update closed the changed channel")
	}
	after := s.update(func(v *int) bool { *v = 0; return true })
	waitClosed(t, before, "a change did not close the channel returned before it")
	if drain(after) {
		t.Fatal("the channel returned by a change is already closed")
	}
}

// TestDrainCoalesces: notifications sent while nobody receives are taken
// by one drain (the notify channel has one slot); drain never blocks, also
// on the nil channel of a polling relay.
func TestDrainCoalesces(t *testing.T) {
	wake := make(chan struct{}, 1)
	if drain(wake) {
		t.Fatal("drain of an empty channel reported a wake-up")
	}
	for range 5 {
		select { // how listen.Listener coalesces its wake-ups
		case wake <- struct{}{}:
		default:
		}
	}
	if !drain(wake) {
		t.Fatal("five wake-ups: drain took none")
	}
	if drain(wake) {
		t.Fatal("five wake-ups: a second drain took one too")
	}
	var none chan struct{}
	if drain(none) {
		t.Fatal("drain of a nil channel reported a wake-up")
	}
}
