package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
)

// ExpectedFromTable reads every row of the outbox table (optionally
// schema-qualified) ordered by seq. Every row is a committed event: a
// rolled-back transaction leaves none, so the table is the ground truth even
// when a writer could not tell whether its commit succeeded.
func ExpectedFromTable(ctx context.Context, pool *pgxpool.Pool, table string) ([]Expected, error) {
	if table == "" {
		table = outbox.DefaultTable
	}
	rows, err := pool.Query(ctx, "SELECT id, aggregate_id, payload::text, seq FROM "+outbox.TableIdentifier(table)+" ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("checker: read %s: %w", table, err)
	}
	defer rows.Close()
	var out []Expected
	for rows.Next() {
		var e Expected
		var payload *string
		if err := rows.Scan(&e.ID, &e.AggregateID, &payload, &e.Seq); err != nil {
			return nil, fmt.Errorf("checker: read %s: %w", table, err)
		}
		if payload != nil {
			e.Payload = []byte(*payload)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checker: read %s: %w", table, err)
	}
	return out, nil
}

// ObserveTopic reads topic from the start of every partition with an
// independent franz-go consumer until it has seen want distinct event IDs
// and has read up to the end offsets that the partitions had at that moment
// (so duplicates already on the topic are included), or until timeout. It
// returns what it read; a timeout is not an error (Check reports what is
// missing). Records are in offset order within each partition.
func ObserveTopic(ctx context.Context, brokers []string, topic string, want int, timeout time.Duration) ([]Observed, error) {
	o, err := NewObserver(ctx, brokers, topic)
	if err != nil {
		return nil, err
	}
	defer o.Stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !o.WaitDistinct(ctx, want) {
		return o.Stop(), nil
	}
	_ = o.WaitCaughtUp(ctx)
	return o.Stop(), nil
}

// Observer consumes a topic in the background from the start of every
// partition, recording every record as an Observed with its reception time.
type Observer struct {
	cl     *kgo.Client
	topic  string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	cond     *sync.Cond
	recs     []Observed
	ids      map[string]struct{}
	next     map[int32]int64 // per partition: offset after the last record read
	rereads  int             // records at offsets already read (the consumer's position was reset)
	stopped  bool
	fetchErr error
}

// NewObserver starts consuming topic.
func NewObserver(ctx context.Context, brokers []string, topic string) (*Observer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ClientID("outbox-checker"),
	)
	if err != nil {
		return nil, fmt.Errorf("checker: consumer: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	o := &Observer{cl: cl, topic: topic, cancel: cancel, done: make(chan struct{}),
		ids: map[string]struct{}{}, next: map[int32]int64{}}
	o.cond = sync.NewCond(&o.mu)
	go o.run(cctx)
	return o, nil
}

func (o *Observer) run(ctx context.Context) {
	defer close(o.done)
	defer func() {
		o.mu.Lock()
		o.stopped = true
		o.cond.Broadcast()
		o.mu.Unlock()
	}()
	for {
		fs := o.cl.PollFetches(ctx)
		now := time.Now()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		var batch []Observed
		fs.EachRecord(func(r *kgo.Record) {
			ob := Observed{Key: string(r.Key), Value: r.Value, Partition: r.Partition, Offset: r.Offset, ReceivedAt: now}
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					ob.EventID = string(h.Value)
				}
			}
			batch = append(batch, ob)
		})
		o.mu.Lock()
		fs.EachError(func(_ string, _ int32, err error) { o.fetchErr = err })
		for _, ob := range batch {
			if ob.Offset < o.next[ob.Partition] {
				// The same record again: the consumer's position was
				// reset (kfake resets it when a partition moves to
				// another broker). Not a duplicate in the topic.
				o.rereads++
				continue
			}
			o.recs = append(o.recs, ob)
			if ob.EventID != "" {
				if id, err := uuid.Parse(ob.EventID); err == nil {
					o.ids[id.String()] = struct{}{}
				} else {
					o.ids[ob.EventID] = struct{}{}
				}
			}
			if ob.Offset+1 > o.next[ob.Partition] {
				o.next[ob.Partition] = ob.Offset + 1
			}
		}
		o.cond.Broadcast()
		o.mu.Unlock()
	}
}

// Distinct returns how many distinct event IDs were read so far.
func (o *Observer) Distinct() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ids)
}

// Rereads returns how many records were read again at an offset already
// read; they are not in Records or the observed list.
func (o *Observer) Rereads() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rereads
}

// Records returns how many records were read so far (each offset once).
func (o *Observer) Records() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.recs)
}

// WaitDistinct waits until at least n distinct event IDs were read; it
// returns false if ctx ends or the observer stops first.
func (o *Observer) WaitDistinct(ctx context.Context, n int) bool {
	stop := context.AfterFunc(ctx, func() {
		o.mu.Lock()
		o.cond.Broadcast()
		o.mu.Unlock()
	})
	defer stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.ids) < n {
		if ctx.Err() != nil || o.stopped {
			return false
		}
		o.cond.Wait()
	}
	return true
}

// WaitCaughtUp asks the broker for every partition's current end offset and
// waits until the observer has read up to it.
func (o *Observer) WaitCaughtUp(ctx context.Context) error {
	ends, err := endOffsets(ctx, o.cl, o.topic)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		o.mu.Lock()
		o.cond.Broadcast()
		o.mu.Unlock()
	})
	defer stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		behind := false
		for p, end := range ends {
			if o.next[p] < end {
				behind = true
			}
		}
		if !behind {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if o.stopped {
			return errors.New("checker: observer stopped")
		}
		o.cond.Wait()
	}
}

// Stop stops consuming and returns every record read. It is idempotent.
func (o *Observer) Stop() []Observed {
	o.once.Do(func() {
		o.cancel()
		<-o.done
		o.cl.Close()
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Observed, len(o.recs))
	copy(out, o.recs)
	return out
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("checker: metadata: %w", err)
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.IsolationLevel = 1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, t := range mresp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("checker: metadata %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition = p.Partition
			lp.Timestamp = -1 // latest
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("checker: list offsets: %w", err)
	}
	ends := map[int32]int64{}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("checker: list offsets %s/%d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}
