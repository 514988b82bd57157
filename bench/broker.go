package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
)

// warmupPartitions is the partition count of the warm-up topic: the
// partitions of `make bench-real`'s topics, so that the broker's paths for
// several partitions per request are warm too.
const warmupPartitions = 6

// warmBroker produces records to a topic of its own for d and reads them
// back, so that a freshly started JVM broker has compiled its produce and
// fetch paths before anything is measured: two produce.Publishers (acks=all,
// as the relay's), one sending one record per call, the other 50 per call,
// each as fast as the broker answers, and a franz-go consumer with the
// tracker's fetch settings. It returns what it did, for the report.
func warmBroker(ctx context.Context, brokers []string, d time.Duration, log *zap.Logger) (string, error) {
	env := &Env{Brokers: brokers, Partitions: warmupPartitions, Log: log}
	topic, err := env.freshTopic(ctx, "warmup")
	if err != nil {
		return "", err
	}
	defer env.dropTopic(topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(ConsumerFetchMaxWait),
		kgo.ClientID("outbox-bench-warmup"))
	if err != nil {
		return "", fmt.Errorf("bench: broker warm-up: %w", err)
	}
	defer cl.Close()
	var read atomic.Int64
	cctx, stopReading := context.WithCancel(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for cctx.Err() == nil {
			read.Add(int64(cl.PollFetches(cctx).NumRecords()))
		}
	}()
	body := payload(100)
	var sent atomic.Int64
	var lastErr atomic.Value // the last retriable publish error
	// Calls are not cut at d: each loop stops between calls once d has
	// passed and something was acknowledged (a cold broker on a busy
	// machine may take longer than a short d for its first answer), within
	// a minute more at most.
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	more := func() bool { return wctx.Err() == nil && (time.Since(began) < d || sent.Load() == 0) }
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, per := range []int{1, 50} {
		pub, err := produce.NewPublisher(kafka.Config{Brokers: brokers, Topic: topic, ClientID: "outbox-bench-warmup"}, log)
		if err != nil {
			stopReading()
			return "", err
		}
		defer pub.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]kafka.Message, per)
			for i := 0; more(); i++ {
				for j := range msgs {
					msgs[j] = kafka.Message{Key: fmt.Appendf(nil, "warm-%d", (i*per+j)%200), Value: body}
				}
				if err := pub.Send(wctx, msgs); err != nil {
					// A new topic's leaders may take a while on a cold,
					// busy broker (NOT_LEADER_OR_FOLLOWER): what the
					// warm-up is for. It fails only if nothing was ever
					// acknowledged (below).
					if !produce.IsRetriable(err) && !produce.IsOutage(err) {
						if wctx.Err() == nil {
							errs <- fmt.Errorf("bench: broker warm-up: %w", err)
						}
						return
					}
					lastErr.Store(err)
					select {
					case <-wctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				sent.Add(int64(per))
			}
		}()
	}
	wg.Wait()
	// Wait (briefly) until the consumer has read what was acknowledged.
	deadline := time.Now().Add(10 * time.Second)
	for read.Load() < sent.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stopReading()
	<-readDone
	select {
	case err := <-errs:
		return "", err
	default:
	}
	if sent.Load() == 0 || read.Load() == 0 {
		last, _ := lastErr.Load().(error)
		return "", fmt.Errorf("bench: broker warm-up: %d records acknowledged, %d read back in %s (last publish error: %v)", sent.Load(), read.Load(), time.Since(began).Round(time.Millisecond), last)
	}
	s := fmt.Sprintf("%s: %d records acknowledged on %d partitions (produce.Publisher, acks=all, 1 and 50 per call), %d read back (franz-go)",
		time.Since(began).Round(100*time.Millisecond), sent.Load(), warmupPartitions, read.Load())
	log.Info("kafka broker warmed up", zap.String("warmup", s))
	return s, nil
}

// DefaultFloorProbeRate is LatencyConfig.FloorProbeRate's default:
// one record every 5 ms.
const DefaultFloorProbeRate = 200

// floorProbe measures the broker's own produce-to-consume latency while a
// latency run's writers run, on the same broker and under the same load:
// a produce.Publisher of its own (acks=all) sends one record per Publish
// call at a steady rate to a topic of its own, and a franz-go consumer
// with the tracker's fetch settings reads them back. Each record's latency
// runs from the start of its Publish call to its receipt.
type floorProbe struct {
	pub   *produce.Publisher
	tr    *tracker
	topic string
	env   *Env
	rate  float64
	body  []byte
	ids   []uuid.UUID
	sent  []time.Time // by record index; written by run only
	n     atomic.Int64
	warm  int
	began bool
	once  sync.Once // closes stop
	stop  chan struct{}
	done  chan struct{}
	err   error // set by run before done is closed
	log   *zap.Logger
}

// probeWarmup is the number of probe records sent and received before the
// measured ones: connections and metadata are then established.
const probeWarmup = 10

// startFloorProbe creates the probe's topic (Env.Partitions partitions),
// its producer and consumer, and sends probeWarmup records through them.
// It can send up to max records after that, from begin on.
func (e *Env) startFloorProbe(ctx context.Context, rate float64, max, payloadBytes int, log *zap.Logger) (*floorProbe, error) {
	log = log.Named("floor-probe")
	topic, err := e.freshTopic(ctx, "floor-probe")
	if err != nil {
		return nil, err
	}
	p := &floorProbe{topic: topic, env: e, rate: rate, body: payload(payloadBytes), warm: probeWarmup,
		stop: make(chan struct{}), done: make(chan struct{}), log: log}
	ids := make([]uuid.UUID, probeWarmup+max)
	for i := range ids {
		ids[i] = outbox.NewID()
	}
	p.ids, p.sent = ids, make([]time.Time, len(ids))
	if p.pub, err = produce.NewPublisher(kafka.Config{Brokers: e.Brokers, Topic: topic, ClientID: "outbox-bench-floor-probe"}, log); err != nil {
		e.dropTopic(topic)
		return nil, err
	}
	if p.tr, err = startTracker(ctx, e.Brokers, topic, ids, log); err != nil {
		p.close()
		return nil, err
	}
	for i := range probeWarmup {
		if err := p.send(ctx, i); err != nil {
			p.close()
			return nil, fmt.Errorf("bench: floor probe warm-up: %w", err)
		}
	}
	if !p.tr.waitFor(ctx, probeWarmup, 30*time.Second) {
		p.close()
		return nil, fmt.Errorf("bench: floor probe warm-up: %d of %d records arrived within 30s", p.tr.Distinct(), probeWarmup)
	}
	return p, nil
}

// begin starts sending the measured records, the first at start.
func (p *floorProbe) begin(ctx context.Context, start time.Time) {
	p.began = true
	go p.run(ctx, start)
}

// send publishes record i (one per call) and notes when the call started.
func (p *floorProbe) send(ctx context.Context, i int) error {
	m := kafka.Message{Key: fmt.Appendf(nil, "probe-%d", i%64), Value: p.body,
		Headers: []kafka.Header{{Key: "event_id", Value: []byte(p.ids[i].String())}}}
	p.sent[i] = time.Now()
	return p.pub.Send(ctx, []kafka.Message{m})
}

// run sends the measured records, record k at start + k/rate (or at once
// when the previous call returned late), until finish or the last record.
func (p *floorProbe) run(ctx context.Context, start time.Time) {
	defer close(p.done)
	interval := time.Duration(float64(time.Second) / p.rate)
	for k := 0; p.warm+k < len(p.ids); k++ {
		wait := time.Until(start.Add(time.Duration(k) * interval))
		t := time.NewTimer(max(wait, 0))
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := p.send(ctx, p.warm+k); err != nil {
			if ctx.Err() == nil {
				p.err = fmt.Errorf("bench: floor probe: %w", err)
			}
			return
		}
		p.n.Add(1)
	}
}

// finish stops sending, waits up to grace for the records sent to arrive
// and returns their latencies' summary, the number sent and how many did
// not arrive.
func (p *floorProbe) finish(ctx context.Context, grace time.Duration) (s Summary, sent, lost int64, err error) {
	if !p.began {
		return Summary{}, 0, 0, nil
	}
	p.halt()
	sent = p.n.Load()
	p.tr.waitFor(ctx, int64(p.warm)+sent, grace)
	p.tr.Stop()
	h := NewHistogram()
	for i := p.warm; i < p.warm+int(sent); i++ {
		if p.tr.recv[i].IsZero() {
			lost++
			continue
		}
		RecordDuration(h, p.tr.recv[i].Sub(p.sent[i]))
	}
	return Summarize(h), sent, lost, p.err
}

// halt stops sending and waits for the sender to return.
func (p *floorProbe) halt() {
	p.once.Do(func() { close(p.stop) })
	if p.began {
		<-p.done
	}
}

// close stops the probe and releases its producer, consumer and topic.
func (p *floorProbe) close() {
	p.halt()
	if p.tr != nil {
		p.tr.Stop()
	}
	if p.pub != nil {
		_ = p.pub.Close()
	}
	p.env.dropTopic(p.topic)
}

// floorProbeMax is how many records a probe at rate may send in a run of
// d: twice the run's length plus a minute, so that writers falling behind
// their schedule do not run it dry.
func floorProbeMax(rate float64, d time.Duration) int {
	return int(math.Ceil(rate * (2*d + time.Minute).Seconds()))
}
