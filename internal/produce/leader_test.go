package produce

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestLeaderMoves publishes continuously to a 3-broker cluster while every
// partition's leader moves to another broker, 5 times. Nothing may be lost
// or reordered per key, and each partition must accept records again
// within stallLimit of a move: kafka-go alone learns the new leader only
// at its next periodic metadata refresh (at a random time below
// Config.MetadataTTL); the Publisher refreshes as soon as a produce
// request fails with NOT_LEADER_OR_FOLLOWER (see refreshingTransport).
//
// MetadataTTL is 10 minutes here so that the two are told apart however
// slow the machine: a partition that waited for the periodic refresh
// would stall over stallLimit (30 s) after 19 of 20 moves. With the
// default 6 s the limit had to be 1 s, which a loaded machine's
// scheduling alone can exceed.
func TestLeaderMoves(t *testing.T) {
	const (
		partitions  = 6
		moves       = 5
		metadataTTL = 10 * time.Minute
		stallLimit  = metadataTTL / 20
	)
	k := testenv.KafkaCluster(t, 3)
	topic := k.Topic(t, partitions)
	p := newTestPublisher(t, kafka.Config{Brokers: k.Brokers, Topic: topic, MetadataTTL: metadataTTL})

	keys := make([]string, 0, 4*partitions)
	partOf := map[string]int32{}
	for i := 0; len(keys) < cap(keys); i++ {
		key := fmt.Sprintf("agg-%d", i)
		pt := int32(Partition([]byte(key), partitions))
		n := 0
		for _, k := range keys {
			if partOf[k] == pt {
				n++
			}
		}
		if n < 4 { // 4 keys on every partition
			keys = append(keys, key)
			partOf[key] = pt
		}
	}

	// The producer: every round publishes the messages that failed last
	// round (first, in order) and then one new message per key, so per-key
	// order holds as long as Publish keeps it within one call.
	var (
		mu       sync.Mutex
		okAt     [partitions][]time.Time // start of each Publish call that delivered to the partition
		okEnd    [partitions][]time.Time // and its end
		sent     = map[string]int{}      // key -> messages created
		failures = map[string]int{}      // error reason -> count
	)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan []kafka.Message)
	go func() {
		var pending []kafka.Message
		for ctx.Err() == nil {
			batch := append([]kafka.Message(nil), pending...)
			for _, key := range keys {
				mu.Lock()
				n := sent[key]
				sent[key]++
				mu.Unlock()
				batch = append(batch, kafka.Message{Key: []byte(key), Value: []byte(fmt.Sprint(n))})
			}
			start := time.Now()
			err := p.Send(context.Background(), batch)
			end := time.Now()
			pending = pending[:0]
			delivered := [partitions]bool{}
			var pe *PublishError
			switch {
			case err == nil:
				for i := range delivered {
					delivered[i] = true
				}
			case errors.As(err, &pe):
				for i, e := range pe.Errs {
					pt := partOf[string(batch[i].Key)]
					if e == nil {
						delivered[pt] = true
						continue
					}
					pending = append(pending, batch[i])
					mu.Lock()
					failures[ErrorReason(e)]++
					mu.Unlock()
				}
			default:
				pending = append(pending, batch...)
				mu.Lock()
				failures[ErrorReason(err)]++
				mu.Unlock()
			}
			mu.Lock()
			for pt, ok := range delivered {
				if ok {
					okAt[pt] = append(okAt[pt], start)
					okEnd[pt] = append(okEnd[pt], end)
				}
			}
			mu.Unlock()
		}
		done <- pending
	}()

	// firstOK returns when partition pt first accepted records in a
	// Publish call started at or after t.
	firstOK := func(pt int, t time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for i, s := range okAt[pt] {
			if !s.Before(t) {
				return okEnd[pt][i], true
			}
		}
		return time.Time{}, false
	}

	testenv.Eventually(t, 10*time.Second, func() bool {
		for pt := 0; pt < partitions; pt++ {
			if _, ok := firstOK(pt, time.Time{}); !ok {
				return false
			}
		}
		return true
	}, "every partition accepts records before the first move")

	var stalls []time.Duration
	for m := 0; m < moves; m++ {
		moved := time.Now()
		for pt := int32(0); pt < partitions; pt++ {
			k.MoveLeader(t, topic, pt)
		}
		worst := time.Duration(0)
		for pt := 0; pt < partitions; pt++ {
			var at time.Time
			// A hang guard, longer than stallLimit: the stall is checked
			// with its measured value below.
			testenv.Eventually(t, 2*stallLimit, func() bool {
				var ok bool
				at, ok = firstOK(pt, moved)
				return ok
			}, "partition %d accepts records after move %d", pt, m+1)
			stall := at.Sub(moved)
			stalls = append(stalls, stall)
			worst = max(worst, stall)
		}
		t.Logf("move %d: longest stall %v", m+1, worst.Round(time.Millisecond))
	}
	stop()
	pending := <-done

	// Deliver what the last round left undelivered, then check the topic.
	for try := 0; len(pending) > 0; try++ {
		if try == 50 {
			t.Fatalf("%d messages still undelivered: %v", len(pending), p.Send(context.Background(), pending))
		}
		err := p.Send(context.Background(), pending)
		var pe *PublishError
		switch {
		case err == nil:
			pending = nil
		case errors.As(err, &pe):
			var left []kafka.Message
			for i, e := range pe.Errs {
				if e != nil {
					left = append(left, pending[i])
				}
			}
			pending = left
		}
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	recs := consume(t, k.Brokers, topic, total)
	next := map[string]int{}
	dups := 0
	for _, r := range recs {
		key := string(r.Key)
		var n int
		if _, err := fmt.Sscan(string(r.Value), &n); err != nil {
			t.Fatalf("value %q: %v", r.Value, err)
		}
		switch {
		case n == next[key]:
			next[key]++
		case n < next[key]:
			dups++ // a redelivery of an earlier record: allowed (at least once)
		default:
			t.Fatalf("key %s: record %d arrived before record %d", key, n, next[key])
		}
	}
	for _, key := range keys {
		if next[key] != sent[key] {
			t.Errorf("key %s: %d of %d records arrived", key, next[key], sent[key])
		}
	}

	sort.Slice(stalls, func(i, j int) bool { return stalls[i] < stalls[j] })
	mu.Lock()
	t.Logf("%d records, %d duplicates; stall per partition and move: median %v, max %v; failed publishes by reason: %v",
		total, dups, stalls[len(stalls)/2].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond), failures)
	mu.Unlock()
	t.Logf("transports swapped in by metadata refreshes: %d", p.transport.refreshes.Load())
	if worst := stalls[len(stalls)-1]; worst > stallLimit {
		t.Errorf("a partition stalled %v after a leader move, want at most %v", worst, stallLimit)
	}
}
