package relay

import "testing"

// TestSignalCoalesces: wake-ups raised before the waiter looks are one
// wake-up; raise never blocks; drain takes a pending one without waiting.
func TestSignalCoalesces(t *testing.T) {
	s := newSignal()
	if drain(s.C()) {
		t.Fatal("a new signal has a wake-up pending")
	}
	for range 5 {
		s.raise() // must not block
	}
	if !drain(s.C()) {
		t.Fatal("five raises delivered no wake-up")
	}
	if drain(s.C()) {
		t.Fatal("five raises delivered more than one wake-up")
	}
	s.raise()
	select {
	case <-s.C():
	default:
		t.Fatal("a raise after the wake-up was taken delivered nothing")
	}
	// drain on a channel that nobody signals (a nil wake channel of a
	// polling relay) reports nothing.
	var none chan struct{}
	if drain(none) {
		t.Fatal("drain of a nil channel reported a wake-up")
	}
}
