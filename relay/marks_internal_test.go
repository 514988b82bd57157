package relay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestMarkQueue: jobs come out in order, by due time for the marker and
// all at once for a claim; a put into a full queue makes every job due at
// once and waits until a take makes room; every change wakes whoever
// waits on the channel next returned; close lets a waiting put go on.
func TestMarkQueue(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newMarkQueue(stubClock{now: func() time.Time { return now }})
	q.limit = 2
	if q.next().waiting {
		t.Fatal("a new queue has a job waiting")
	}
	changed := q.next().changed
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	q.put(a, []int64{1}, 10*time.Millisecond)
	waitClosed(t, changed, "put did not wake a waiter")
	q.put(b, []int64{2}, 20*time.Millisecond)
	if v := q.next(); !v.waiting || !v.due.Equal(now.Add(10*time.Millisecond)) {
		t.Fatalf("next = %+v; want the first job, due in 10ms", v)
	}
	if got := q.take(now.Add(15 * time.Millisecond)); len(got) != 1 || got[0].token != a {
		t.Fatalf("take(due 15ms) = %+v, want the first job only", got)
	}
	q.put(a, []int64{3}, 30*time.Millisecond) // full again: b, a

	// A put into the full queue waits, and makes every job due now.
	changed = q.next().changed
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.put(c, []int64{4}, 0)
	}()
	waitClosed(t, changed, "a put into a full queue did not wake the marker")
	if v := q.next(); !v.due.Equal(now) {
		t.Fatalf("a full queue's jobs are due at %v, want now", v.due.Sub(now))
	}
	got := q.take(time.Time{}) // a claim takes them all
	if len(got) != 2 || got[0].token != b || got[1].token != a {
		t.Fatalf("take(all) = %+v, want b then a", got)
	}
	waitClosed(t, done, "put did not go on once a take made room")
	q.putBack(got) // the claim failed: back at the front, due now
	if got := q.take(now); len(got) != 3 || got[0].token != b || got[1].token != a || got[2].token != c {
		t.Fatalf("after putBack, take(now) = %+v, want b, a, c", got)
	}

	// close lets a waiting put go on.
	q.put(a, nil, time.Hour)
	q.put(b, nil, time.Hour)
	changed = q.next().changed
	done = make(chan struct{})
	go func() {
		defer close(done)
		q.put(c, nil, time.Hour)
	}()
	waitClosed(t, changed, "a put into a full queue did not wake the marker")
	q.close()
	waitClosed(t, done, "put still waits after close")
	if !q.next().closed {
		t.Fatal("next().closed is false after close")
	}
}

// TestMarkerReturnsWhenClosedAtAnyMoment: the publisher closes the mark
// queue when it stops, and the marker must then return at once, whatever
// it was doing at that moment. The stub clock closes the queue from inside
// the marker's k-th reading of the time, and changes the queue at each
// reading before (so that the marker goes round again), for k up to a few
// rounds: the close lands at each point of the loop where the marker reads
// the clock, among them the one between reading whether the queue is
// closed and waiting on its changes. No change follows the close, so a
// marker that missed it would wait until work is done, which here is
// never (in the relay: until ShutdownGrace ends, failing its leave).
func TestMarkerReturnsWhenClosedAtAnyMoment(t *testing.T) {
	for k := 1; k <= 4; k++ {
		var q *markQueue
		calls := 0
		now := time.Unix(1000, 0)
		c := stubClock{now: func() time.Time {
			switch calls++; {
			case calls == k:
				q.close()
			case calls < k:
				q.s.update(func(*markState) bool { return true })
			}
			return now
		}}
		q = newMarkQueue(c)
		r := &Relay{clock: c, marks: q, stop: newShutdown()}
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.runMarker(context.Background())
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("close at the marker's clock reading %d: the marker did not return", k)
		}
		if calls < k {
			t.Fatalf("k=%d: the marker returned after %d clock readings, before the close", k, calls)
		}
	}
}

// waitClosed fails the test unless ch is closed within 10s.
func waitClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}
