package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// ConsumerFetchMaxWait is the consumer's fetch.max.wait (franz-go's minimum, 10ms): how long the broker
// may hold a fetch with no new data. A fetch returns as soon as data
// arrives; this only bounds idle round trips.
const ConsumerFetchMaxWait = 10 * time.Millisecond

// tracker consumes a topic and records when each known event was first
// received, by its event_id header. Event IDs must be registered (ids)
// before the consumer starts; recv is written by the consumer goroutine only
// and may be read once Stop returned.
type tracker struct {
	index map[uuid.UUID]int
	recv  []time.Time
	// part and off are the partition and offset of each event's first
	// reception (off -1: not received), for order checks.
	part []int32
	off  []int64

	distinct   atomic.Int64
	duplicates atomic.Int64
	unknown    atomic.Int64
	lastRecv   atomic.Int64 // unix nanos of the latest first reception
	// firstRecv is the unix nanos of the first first-reception since
	// resetFirst (0: none yet).
	firstRecv atomic.Int64

	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	log    *zap.Logger
	once   sync.Once
}

// startTracker starts a franz-go consumer of topic from its start.
func startTracker(ctx context.Context, brokers []string, topic string, ids []uuid.UUID, log *zap.Logger) (*tracker, error) {
	t := &tracker{
		index: make(map[uuid.UUID]int, len(ids)),
		recv:  make([]time.Time, len(ids)),
		part:  make([]int32, len(ids)),
		off:   make([]int64, len(ids)),
		done:  make(chan struct{}),
		log:   log.Named("consumer"),
	}
	for i, id := range ids {
		t.index[id] = i
		t.off[i] = -1
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(ConsumerFetchMaxWait),
		kgo.ClientID("outbox-bench-consumer"),
	)
	if err != nil {
		return nil, fmt.Errorf("bench: consumer: %w", err)
	}
	t.cl = cl
	cctx, cancel := context.WithCancel(ctx)
	t.cancel = cancel
	go t.run(cctx)
	return t, nil
}

func (t *tracker) run(ctx context.Context) {
	defer close(t.done)
	for {
		fs := t.cl.PollFetches(ctx)
		now := time.Now()
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.log.Warn("fetch error", zap.String("topic", topic), zap.Int32("partition", p), zap.Error(err))
		})
		fs.EachRecord(func(r *kgo.Record) {
			var id uuid.UUID
			found := false
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					if v, err := uuid.ParseBytes(h.Value); err == nil {
						id, found = v, true
					}
					break
				}
			}
			i, ok := t.index[id]
			if !found || !ok {
				t.unknown.Add(1)
				return
			}
			if !t.recv[i].IsZero() {
				t.duplicates.Add(1)
				return
			}
			t.recv[i] = now
			t.part[i], t.off[i] = r.Partition, r.Offset
			t.lastRecv.Store(now.UnixNano())
			t.firstRecv.CompareAndSwap(0, now.UnixNano())
			t.distinct.Add(1)
		})
	}
}

// resetFirst starts watching for the next first reception of an event
// (firstSinceReset).
func (t *tracker) resetFirst() { t.firstRecv.Store(0) }

// firstSinceReset returns when the first event received since resetFirst
// arrived (the zero time if none did).
func (t *tracker) firstSinceReset() time.Time {
	if v := t.firstRecv.Load(); v > 0 {
		return time.Unix(0, v)
	}
	return time.Time{}
}

// Distinct returns how many distinct known events were received so far.
func (t *tracker) Distinct() int64 { return t.distinct.Load() }

// waitFor waits until n distinct events were received, ctx is done or
// timeout passed; it reports whether all n arrived.
func (t *tracker) waitFor(ctx context.Context, n int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for t.distinct.Load() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Stop stops the consumer; afterwards recv may be read.
func (t *tracker) Stop() {
	t.once.Do(func() {
		t.cancel()
		<-t.done
		t.cl.Close()
	})
}
