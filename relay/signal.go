package relay

// signal is a coalescing wake-up between two goroutines: any number of
// raise calls before the waiter receives from C deliver one wake-up, and
// raise never blocks. It is the one-slot channel pattern the relay uses
// wherever one goroutine tells another "something changed, look again"
// without saying what (the claim gate, the mark queue), and the way it
// coalesces the wake-ups of notifications (drain).
type signal chan struct{}

func newSignal() signal { return make(signal, 1) }

// raise wakes the waiter, or does nothing when a wake-up is pending.
func (s signal) raise() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// C is the channel to receive the wake-up from.
func (s signal) C() <-chan struct{} { return s }

// drain takes the wake-up pending on ch, if any, without waiting, and
// reports whether there was one: the claim about to start covers it, so
// that the notifications that arrived while the claimer was busy cost one
// claim, not one each.
func drain(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
