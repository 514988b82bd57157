package produce

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
	"go.uber.org/zap"
)

// staleMetadataCodes are produce errors that mean the client's view of
// the partition's leader may be out of date. Most are
// InvalidMetadataException subclasses in the Java client, on which its
// producer requests a metadata update (Sender.completeBatch); error codes:
// https://kafka.apache.org/protocol#protocol_error_codes.
var staleMetadataCodes = map[int16]bool{
	int16(kafkago.UnknownTopicOrPartition): true,
	int16(kafkago.LeaderNotAvailable):      true,
	int16(kafkago.NotLeaderForPartition):   true,
	int16(kafkago.NetworkException):        true,
	int16(kafkago.KafkaStorageError):       true,
	int16(kafkago.FencedLeaderEpoch):       true,
	int16(kafkago.UnknownLeaderEpoch):      true,
}

// refreshingTransport is the Writer's kafka-go RoundTripper. It forwards
// every request to a kafka-go Transport and, when a produce request fails
// because the partition's leader moved (staleMetadataCodes) or with a
// network error, replaces that Transport with a fresh one whose metadata
// is current.
//
// Why: kafka-go v0.4.51 caches cluster metadata in the Transport's
// connection pool (transport.go: connPool.state, refreshed by
// connPool.discover at random intervals below Transport.MetadataTTL) and
// routes each produce request to the leader in that cache
// (connPool.sendRequest via produce.Request.Broker). Writer retries
// (writer.go: partitionWriter.writeBatch) go to the same stale leader, so
// after a leader move a partition stalls until the next periodic refresh,
// up to MetadataTTL (6s). kafka-go forces a refresh (connPool.
// refreshMetadata, which wakes discover) only after CreateTopics or an
// auto-creating Metadata request, not after NOT_LEADER_OR_FOLLOWER, and
// has no exported way to trigger one (kafka-go #1221, #1374).
//
// How: a new Transport has an empty cache and fetches metadata on its
// first request (grabPool starts discover, and connPool.roundTrip waits for
// its first answer). In the background, refresh builds one, asks it for the
// failed topic's metadata, and only if that succeeded swaps it in and
// calls CloseIdleConnections on the old one (which drops its pools once
// the requests in flight on them are done). If the new Transport cannot
// get metadata (the cluster is down), it is discarded and the old one, with
// its last known metadata, stays: errors during an outage stay network
// errors. kafka-go's retry backoff (100ms before the second attempt) gives
// the refresh time to finish before the retry, which then reaches the new
// leader. Refreshes are coalesced: a failed request triggers one unless a
// refresh started after the request was sent. A replaced Transport is
// closed once no request runs on it any more: calling a Transport after
// CloseIdleConnections would make it start a new pool (and discover
// goroutine) that nothing would close.
type refreshingTransport struct {
	newTransport func() *kafkago.Transport
	addr         net.Addr      // the Writer's Addr: kafka-go keys its pools by it
	timeout      time.Duration // bounds one refresh
	log          *zap.Logger
	obs          Observer // told every produce request's duration; nil: none

	curMu     sync.Mutex
	cur       *transportRef
	refreshes atomic.Int64 // Transports swapped in

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	running   bool
	again     bool      // another refresh is due after the running one
	againTop  string    // its topic
	lastStart time.Time // start of the last refresh
}

func newRefreshingTransport(newTransport func() *kafkago.Transport, addr net.Addr, timeout time.Duration,
	log *zap.Logger) *refreshingTransport {
	ctx, cancel := context.WithCancel(context.Background())
	r := &refreshingTransport{newTransport: newTransport, addr: addr, timeout: timeout, log: log,
		ctx: ctx, cancel: cancel}
	r.cur = &transportRef{t: newTransport()}
	return r
}

// transportRef counts the requests running on a Transport; guarded by
// refreshingTransport.curMu.
type transportRef struct {
	t       *kafkago.Transport
	refs    int
	retired bool // replaced: close when refs drops to 0
}

// acquire returns the current Transport, or nil after close.
func (r *refreshingTransport) acquire() *transportRef {
	r.curMu.Lock()
	defer r.curMu.Unlock()
	if r.cur.retired {
		return nil
	}
	r.cur.refs++
	return r.cur
}

func (r *refreshingTransport) release(tr *transportRef) {
	r.curMu.Lock()
	tr.refs--
	closeNow := tr.retired && tr.refs == 0
	r.curMu.Unlock()
	if closeNow {
		tr.t.CloseIdleConnections()
	}
}

// replace makes t the current Transport (nil: none, after close) and
// retires the old one.
func (r *refreshingTransport) replace(t *kafkago.Transport) {
	r.curMu.Lock()
	old := r.cur
	if t != nil {
		r.cur = &transportRef{t: t}
	}
	old.retired = true
	closeNow := old.refs == 0
	r.curMu.Unlock()
	if closeNow {
		old.t.CloseIdleConnections()
	}
}

// RoundTrip implements kafka-go's RoundTripper.
func (r *refreshingTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafkago.Request) (kafkago.Response, error) {
	sent := time.Now()
	tr := r.acquire()
	if tr == nil {
		return nil, errClosed
	}
	resp, err := tr.t.RoundTrip(ctx, addr, req)
	r.release(tr)
	topic, produce := "", false
	switch pr := req.(type) {
	case *produceAPI.Request:
		produce = true
		if len(pr.Topics) > 0 {
			topic = pr.Topics[0].Topic
		}
	case *rawproduce.Request: // the idempotent producer's
		produce = true
		if len(pr.Topics) > 0 {
			topic = pr.Topics[0].Topic
		}
	}
	if produce {
		if r.obs != nil {
			r.obs.Produced(time.Since(sent), produceOutcome(resp, err))
		}
		if topic != "" && staleMetadata(resp, err) {
			r.refresh(sent, topic)
		}
	}
	return resp, err
}

// staleMetadata reports whether a produce request's outcome means the
// cached leaders may be out of date.
func staleMetadata(resp kafkago.Response, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled) && isNetworkError(err)
	}
	pr, ok := resp.(*produceAPI.Response)
	if !ok {
		return false
	}
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			if staleMetadataCodes[p.ErrorCode] {
				return true
			}
		}
	}
	return false
}

// refresh starts a background refresh unless one started after sent.
func (r *refreshingTransport) refresh(sent time.Time, topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed, r.lastStart.After(sent):
	case r.running:
		r.again, r.againTop = true, topic
	default:
		r.running, r.lastStart = true, time.Now()
		r.wg.Add(1)
		go r.run(topic)
	}
}

func (r *refreshingTransport) run(topic string) {
	defer r.wg.Done()
	for {
		start := time.Now()
		err := r.swap(topic)
		if err != nil {
			r.log.Debug("kafka metadata refresh after a failed produce request: failed; keeping the cached metadata",
				zap.String("topic", topic), zap.Error(err))
		} else {
			r.log.Debug("kafka metadata refreshed after a failed produce request",
				zap.String("topic", topic), zap.Duration("took", time.Since(start)))
		}
		r.mu.Lock()
		if !r.again || r.closed {
			r.running = false
			r.mu.Unlock()
			return
		}
		topic, r.again, r.lastStart = r.againTop, false, time.Now()
		r.mu.Unlock()
	}
}

var errRefreshClosed = errors.New("publisher closed")

func (r *refreshingTransport) swap(topic string) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	t := r.newTransport()
	if _, err := t.RoundTrip(ctx, r.addr, &metadataAPI.Request{TopicNames: []string{topic}}); err != nil {
		t.CloseIdleConnections()
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		t.CloseIdleConnections()
		return errRefreshClosed
	}
	r.replace(t)
	r.refreshes.Add(1)
	return nil
}

// close stops refreshing, waits for a running refresh and closes the
// current Transport once no request runs on it (the Writer is closed
// first, so normally at once).
func (r *refreshingTransport) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.replace(nil)
}
