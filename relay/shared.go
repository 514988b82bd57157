package relay

// shared holds a value of type T that several goroutines use, and is its
// one synchronisation: a one-slot channel holds the value while no
// goroutine uses it, so that taking it from the channel locks it and
// putting it back unlocks it; and every change closes a channel on which
// the goroutines waiting for a change select, next to their timer or
// context. The relay's queues between goroutines that are not a plain
// channel (the mark queue, the claim gate) are each one shared value.
type shared[T any] struct {
	slot chan *sharedBox[T] // one slot
}

type sharedBox[T any] struct {
	v       T
	changed chan struct{} // closed at the next change of v
}

func newShared[T any](v T) *shared[T] {
	s := &shared[T]{slot: make(chan *sharedBox[T], 1)}
	s.slot <- &sharedBox[T]{v: v, changed: make(chan struct{})}
	return s
}

// update calls f with the value, locked; f reports whether it changed the
// value, which wakes the goroutines waiting for a change. update returns
// the channel closed at the next change after f.
func (s *shared[T]) update(f func(v *T) (changed bool)) <-chan struct{} {
	b := <-s.slot
	defer func() { s.slot <- b }()
	if f(&b.v) {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	return b.changed
}

// drain takes the wake-up pending on ch, if any, without waiting, and
// reports whether there was one. The claimer drains the notifications
// (Relay.wake) that arrived while it was busy just before it claims: that
// claim covers them, so that they cost one claim, not one each (with the
// debounce of the claim schedule, schedule.go).
func drain(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
