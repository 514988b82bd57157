// Package produce publishes outbox events to Kafka with segmentio/kafka-go:
// the relay's engine behind package kafka's Config.
//
// A Publisher sends messages synchronously with acks=all and reports, per
// message, which were acknowledged, so the relay can mark exactly those rows
// as published (at-least-once delivery). Messages are partitioned like the
// Java client's default partitioner (murmur2 of the key), so every message of
// one aggregate (key = aggregate ID) lands on one partition, in Publish order.
package produce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgoutbox/outbox/internal/serde"
	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"go.uber.org/zap"
)

// Publisher publishes messages to Kafka through one kafka-go Writer. It is
// safe for concurrent use: concurrent calls are sent one sub-call at a time
// (see write). Per-key ordering is only guaranteed between Publish calls
// that do not overlap in time: the relay must wait for one call (and retry
// its failures) before publishing later events of the same aggregates.
type Publisher struct {
	cfg kafka.Config
	log *zap.Logger
	w   *kafkago.Writer
	// writing admits one WriteMessages call at a time (a one-slot
	// semaphore, so that a Publish waiting for it still ends with its
	// ctx): each call first sets w.BatchSize to its chunk's length (see
	// write).
	writing   chan struct{}
	transport *refreshingTransport
	mech      sasl.Mechanism
	dialer    *brokerDialer
	conns     *connSet
	describe  *describer
	// idem, with Config.Idempotent, sends in place of w (idempotentWriter).
	idem *idempotentWriter
	// watch is the Writer's Balancer (partitionWatch).
	watch *partitionWatch
	// createAsked holds, per topic, when publishOneTopic last waited for
	// the broker to create it (a time.Time), so that a broker that does
	// not create topics costs that wait once per createRetryAfter, not at
	// every publish.
	createAsked sync.Map

	// encoder, when set (SetEncoder), encodes each value before it is sent.
	encoder atomic.Pointer[serde.Encoder]

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// NewPublisher validates cfg, applies defaults and returns a Publisher. It
// does not contact the brokers; use Ping for that. logger may be nil; the
// Publisher logs to logger.Named("kafka").
func NewPublisher(cfg kafka.Config, logger *zap.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = zap.NewNop()
	}
	log := logger.Named("kafka")

	tlsCfg, err := tlsConfig(&cfg)
	if err != nil {
		return nil, err
	}
	mech, err := saslMechanism(&cfg)
	if err != nil {
		return nil, err
	}
	conns := &connSet{m: map[net.Conn]struct{}{}}
	dialer := &brokerDialer{
		net:      &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		tls:      tlsCfg,
		timeout:  cfg.DialTimeout,
		mech:     string(cfg.SASLMechanism),
		user:     cfg.SASLUsername,
		clientID: cfg.ClientID,
	}
	p := &Publisher{cfg: cfg, log: log, mech: mech, dialer: dialer, conns: conns, writing: make(chan struct{}, 1)}
	p.describe = &describer{read: p.readPartitions, brokers: cfg.Brokers, timeout: min(cfg.DialTimeout+cfg.WriteTimeout, describeTimeout)}
	addr := kafkago.TCP(cfg.Brokers...)
	p.transport = newRefreshingTransport(func() *kafkago.Transport {
		// Track every broker connection so Close can cut the ones with a
		// request in flight: kafka-go's Writer.Close otherwise waits for a
		// blackholed produce request through all its attempts (MaxAttempts
		// × WriteTimeout, 12s by default) with no way to cancel it.
		return p.newTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
			return conns.dial(ctx, dialer, network, addr)
		}, nil)
	}, addr, cfg.DialTimeout+cfg.WriteTimeout, log)
	p.transport.obs = cfg.Observer
	p.w = p.newWriter(addr, log)
	if cfg.Idempotent {
		client := &kafkago.Client{Addr: addr, Transport: p.transport, Timeout: cfg.DialTimeout + cfg.WriteTimeout}
		rl := newRetryLogger(log)
		rl.prefix = "idempotent producer: "
		p.idem = &idempotentWriter{p: p, prod: NewIdempotent(client, addr, codec(cfg.Compression)), retryLog: rl, pending: map[tp]*idemBatch{}, written: map[tp][]writtenMsg{}}
	}
	log.Info("publisher configured",
		zap.Strings("brokers", cfg.Brokers),
		zap.String("topic", cfg.Topic),
		zap.String("client_id", cfg.ClientID),
		zap.Duration("batch_timeout", cfg.BatchTimeout),
		zap.Int("batch_size", cfg.BatchSize),
		zap.Int64("batch_bytes", cfg.BatchBytes),
		zap.String("compression", string(cfg.Compression)),
		zap.Bool("idempotent", cfg.Idempotent),
		zap.Bool("fence", cfg.Fence),
		zap.Bool("tls", cfg.TLSEnabled),
		zap.String("sasl_mechanism", string(cfg.SASLMechanism)))
	return p, nil
}

// SetMember makes the publisher produce in transactions under member's
// transactional IDs (transactionalIDs), with Config.Fence; otherwise it
// does nothing. Call it once, before the first Publish: the relay's
// Service does, with its claimer's member name.
func (p *Publisher) SetMember(member string) {
	if p.idem == nil || !p.cfg.Fence {
		return
	}
	// Long enough for a whole write (AttemptBudget), short enough that a
	// relay paused mid-transaction holds read_committed consumers back for
	// about the time its ownership takes to move.
	timeout := max(2*p.AttemptBudget(), time.Second)
	first := p.idem.prod
	for i, id := range p.transactionalIDs(member) {
		t := first
		if i > 0 {
			t = NewIdempotent(first.client, first.addr, first.compression)
		}
		t.SetTransactionalID(id, timeout)
		p.idem.txns = append(p.idem.txns, t)
	}
}

// TransactionalID returns the start of member's transactional IDs with
// Config.Fence: Config.TransactionalIDPrefix followed by member; "/0" and
// "/1" follow it (two IDs, used in turn, so that a write does not wait
// for the markers of the previous write's transaction).
func (p *Publisher) TransactionalID(member string) string {
	return p.cfg.TransactionalIDPrefix + member
}

// newWriter returns the kafka-go Writer on p's transport. Its BatchSize
// is set by write before each call.
func (p *Publisher) newWriter(addr net.Addr, log *zap.Logger) *kafkago.Writer {
	cfg := p.cfg
	p.watch = newPartitionWatch(log, cfg.Observer)
	comp := codec(cfg.Compression)
	return &kafkago.Writer{
		Addr: addr,
		// Java-compatible murmur2 partitioning (Consistent: nil keys hash
		// like empty keys instead of going to a random partition), which
		// also reports a change of a topic's partition count.
		Balancer:     p.watch,
		MaxAttempts:  cfg.MaxAttempts,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes,
		BatchTimeout: cfg.BatchTimeout,
		ReadTimeout:  cfg.WriteTimeout,
		WriteTimeout: cfg.WriteTimeout,
		// kafka-go's defaults, set explicitly because AttemptBudget counts
		// on them.
		WriteBackoffMin: writeBackoffMin,
		WriteBackoffMax: writeBackoffMax,
		// kafka-go's zero value is RequireNone; at-least-once needs all ISRs.
		RequiredAcks:           kafkago.RequireAll,
		Async:                  false,
		Compression:            comp,
		Transport:              p.transport,
		AllowAutoTopicCreation: cfg.AutoCreateTopic,
		ErrorLogger:            newRetryLogger(log),
	}
}

// codec is kafka-go's codec of c (0: none).
func codec(c kafka.Compression) kafkago.Compression {
	switch c {
	case kafka.CompressionGzip:
		return kafkago.Gzip
	case kafka.CompressionSnappy:
		return kafkago.Snappy
	case kafka.CompressionLz4:
		return kafkago.Lz4
	case kafka.CompressionZstd:
		return kafkago.Zstd
	}
	return 0
}

// newTransport returns a kafka-go Transport dialing with dial; a non-nil
// metadataTopics limits its metadata requests to those topics (default:
// all topics). TLS is done by dial (brokerDialer), not by kafka-go.
func (p *Publisher) newTransport(dial func(context.Context, string, string) (net.Conn, error),
	metadataTopics []string) *kafkago.Transport {
	return &kafkago.Transport{
		Dial:           dial,
		DialTimeout:    p.cfg.DialTimeout,
		MetadataTTL:    p.cfg.MetadataTTL,
		MetadataTopics: metadataTopics,
		ClientID:       p.cfg.ClientID,
		SASL:           p.mech,
	}
}

// explain makes an error of a call on topic ("" if none) say what it
// means: SASL error codes wrap errAuthentication with the mechanism and
// user, and UNKNOWN_TOPIC_OR_PARTITION names the topic.
func (p *Publisher) explain(topic string, err error) error {
	if err == nil {
		return nil
	}
	err = annotateAuth(err, string(p.cfg.SASLMechanism), p.cfg.SASLUsername)
	if topic != "" && errors.Is(err, kafkago.UnknownTopicOrPartition) && !IsAuthentication(err) {
		hint := "create it, or enable Config.AutoCreateTopic"
		if p.cfg.AutoCreateTopic {
			hint = "the broker did not create it: auto.create.topics.enable may be false on the broker"
		}
		err = fmt.Errorf("topic %q not found in the cluster metadata (%s): %w", topic, hint, err)
	}
	return err
}

// MaxBatchBytes returns Config.BatchBytes (after defaults): the most bytes,
// as counted by MessageSize, of one produce request (Path.MaxBytes).
func (p *Publisher) MaxBatchBytes() int64 { return p.cfg.BatchBytes }

// PartitionOf returns the partition that a message with key for topic (""
// means Config.Topic) went to in the Publisher's last write to topic:
// Partition(key, n), n being the topic's partition count in the cluster
// metadata that write used. It returns -1 before the first write to topic.
// It reads no metadata and is safe for concurrent use; the relay calls it
// for its traces (relay.Attempt.Partition), right after the write.
func (p *Publisher) PartitionOf(topic string, key []byte) int {
	if topic == "" {
		topic = p.cfg.Topic
	}
	n := p.watch.partitions(topic)
	if n <= 0 {
		return -1
	}
	return Partition(key, n)
}

// MaxBatchMessages returns Config.BatchSize (after defaults): the most
// messages of one produce request (Path.MaxMessages).
func (p *Publisher) MaxBatchMessages() int { return p.cfg.BatchSize }

// Publish publishes msgs through Path: in produce requests of at most
// MaxBatchMessages messages and MaxBatchBytes bytes, each sent with Send,
// and returns what became of each message.
func (p *Publisher) Publish(ctx context.Context, msgs []kafka.Message) []Result {
	path := Path{Send: p.Send, MaxBytes: p.cfg.BatchBytes, MaxMessages: p.cfg.BatchSize}
	if enc := p.encoder.Load(); enc != nil {
		path.Encode = enc.Session()
	}
	return path.Publish(ctx, msgs)
}

// SetEncoder makes Publish encode every message's value with enc (a
// Schema Registry format) before sending it; nil sends values as they
// are. A message enc fails is not sent: serde.ErrSchema makes it a
// DeadLetter (reason "schema"), serde.ErrRegistry and serde.ErrNoSubject
// a RetryOutage ("registry", "no_subject"); later messages of its key in
// the call are Held.
func (p *Publisher) SetEncoder(enc *serde.Encoder) { p.encoder.Store(enc) }

// Encoder returns what SetEncoder set, or nil.
func (p *Publisher) Encoder() *serde.Encoder { return p.encoder.Load() }

// Send writes msgs synchronously, as one kafka-go call per topic: one
// produce request per partition when they fit in one (at most
// MaxBatchMessages messages whose MessageSize sum to at most
// MaxBatchBytes; Path cuts them so). It returns nil if every message was
// acknowledged by all in-sync replicas. Otherwise it returns either
//
//   - a *PublishError with len(Errs) == len(msgs), where Errs[i] is nil if
//     msgs[i] was delivered and the reason otherwise, or
//   - any other error (wrapped as "publish: ..."), meaning no message is known
//     to be delivered: ctx done, errClosed, errNoTopic, or a metadata
//     failure before anything was sent (e.g. brokers unreachable).
//
// Messages for one partition are sent as one produce request, so they
// succeed or fail together. A single message larger than MaxBatchBytes()
// fails alone with a permanent error wrapping kafka-go's
// MessageSizeTooLarge; the others are still sent. A message whose topic
// Kafka can never accept (see outbox.ValidateTopic) fails the same way,
// before sending, with an error wrapping errInvalidTopic (kafka-go's
// InvalidTopic) that says why the name is illegal; classify gives both
// classRejected.
//
// If ctx ends first, Send returns ctx's error, but messages already handed
// to kafka-go may still be delivered later (a duplicate on retry); msgs'
// byte slices must not be modified after such a return. One attempt is
// bounded by Config.WriteTimeout; kafka-go retries retriable errors up to
// Config.MaxAttempts times with 100ms-1s backoff (see AttemptBudget). When
// an attempt fails because the partition's leader moved
// (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) or with a network
// error, the cluster metadata is refreshed at once, so the retry reaches the
// new leader instead of waiting for Config.MetadataTTL.
//
// Errors name their cause: UNKNOWN_TOPIC_OR_PARTITION names the topic, a
// refused SASL exchange wraps errAuthentication, a failed TLS handshake
// ErrTLS.
//
// Messages for several topics are sent as one call per topic, in order of
// each topic's first message: kafka-go fails a whole call when one of its
// topics is unknown (writer.go Writer.WriteMessages returns the first
// topic's metadata error; no kafka-go issue), which would otherwise fail
// the other topics' messages too. A topic's whole-call error then becomes
// the per-message error of that topic's messages only.
func (p *Publisher) Send(ctx context.Context, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if groups := p.topicGroups(msgs); len(groups) > 1 {
		return p.publishByTopic(ctx, msgs, groups)
	}
	return p.publishOneTopic(ctx, msgs)
}

// topicGroups returns the indexes of msgs per destination topic, topics in
// order of first appearance, or nil when every message has the same topic.
func (p *Publisher) topicGroups(msgs []kafka.Message) [][]int {
	first := msgs[0].Topic
	same := true
	for i := 1; i < len(msgs) && same; i++ {
		same = msgs[i].Topic == first
	}
	if same {
		return nil
	}
	byTopic := map[string]int{}
	var groups [][]int
	for i := range msgs {
		t := msgs[i].Topic
		if t == "" {
			t = p.cfg.Topic
		}
		g, ok := byTopic[t]
		if !ok {
			g = len(groups)
			byTopic[t] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

func (p *Publisher) publishByTopic(ctx context.Context, msgs []kafka.Message, groups [][]int) error {
	errs := make([]error, len(msgs))
	failed := false
	for _, g := range groups {
		sub := make([]kafka.Message, len(g))
		for j, i := range g {
			sub[j] = msgs[i]
		}
		err := p.publishOneTopic(ctx, sub)
		if err == nil {
			continue
		}
		if errors.Is(err, errNoTopic) || errors.Is(err, errClosed) || ctx.Err() != nil {
			return err // the whole call's problem, not this topic's
		}
		failed = true
		var pe *PublishError
		if errors.As(err, &pe) && len(pe.Errs) == len(g) {
			for j, i := range g {
				errs[i] = pe.Errs[j]
			}
			continue
		}
		for _, i := range g {
			errs[i] = err
		}
	}
	if !failed {
		return nil
	}
	return &PublishError{Errs: errs}
}

func (p *Publisher) publishOneTopicOnce(ctx context.Context, msgs []kafka.Message) error {
	if p.closed.Load() {
		return fmt.Errorf("publish: %w", errClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	f := &failures{n: len(msgs)}
	km, err := p.toKafkaGo(msgs, f)
	if err != nil {
		return err
	}
	if len(km) > 0 {
		if _, err := p.write(ctx, km, f.fail); err != nil {
			err = p.explain(km[0].Topic, err)
			if f.errs == nil {
				return fmt.Errorf("publish: %w", err) // nothing delivered
			}
			for j := range km {
				f.fail(km[j].WriterData.(int), err)
			}
		}
	}
	if f.errs == nil {
		return nil
	}
	topic := msgs[0].Topic
	if topic == "" {
		topic = p.cfg.Topic
	}
	p.explainPartitions(ctx, topic, msgs, f.errs)
	pe := &PublishError{Errs: f.errs}
	if ce := p.log.Check(zap.DebugLevel, "publish failed"); ce != nil {
		ce.Write(zap.Int("failed", pe.Failed()), zap.Int("messages", len(msgs)), zap.Error(pe))
	}
	return pe
}

// failures collects per-message errors of one call, allocated on the
// first failure.
type failures struct {
	n    int
	errs []error
}

func (f *failures) fail(i int, err error) {
	if f.errs == nil {
		f.errs = make([]error, f.n)
	}
	f.errs[i] = err
}

// toKafkaGo turns msgs (all for one topic) into kafka-go messages,
// failing at once (f) those that can never be sent: an
// illegal topic name, a message over Config.BatchBytes (kafka-go rejects
// the whole call for one such message: kafka-go #364). It returns an error
// for the whole call when no topic applies.
func (p *Publisher) toKafkaGo(msgs []kafka.Message, f *failures) ([]kafkago.Message, error) {
	nh := 0
	for i := range msgs {
		nh += len(msgs[i].Headers)
	}
	hdrs := make([]kafkago.Header, 0, nh)
	km := make([]kafkago.Message, 0, len(msgs))
	var checkedTopic string // the last topic name validated, and the verdict
	var topicErr error
	for i := range msgs {
		m := &msgs[i]
		topic := m.Topic
		if topic == "" {
			topic = p.cfg.Topic
			if topic == "" {
				return nil, fmt.Errorf("publish: message %d: %w", i, errNoTopic)
			}
		}
		if topic != checkedTopic {
			checkedTopic, topicErr = topic, validateTopic(topic)
		}
		if topicErr != nil {
			f.fail(i, topicErr) // a broker would answer INVALID_TOPIC_EXCEPTION
			continue
		}
		size := MessageSize(m)
		if size > p.cfg.BatchBytes {
			f.fail(i, fmt.Errorf("message of %d bytes exceeds Config.BatchBytes %d: %w",
				size, p.cfg.BatchBytes, kafkago.MessageSizeTooLarge))
			continue
		}
		start := len(hdrs)
		for _, h := range m.Headers {
			hdrs = append(hdrs, kafkago.Header{Key: h.Key, Value: h.Value})
		}
		km = append(km, kafkago.Message{
			Topic:      topic,
			Key:        m.Key,
			Value:      m.Value,
			Headers:    hdrs[start:len(hdrs):len(hdrs)],
			WriterData: i,
		})
	}
	return km, nil
}

// write sends one chunk with kafka-go and records per-message failures via
// fail. It returns whether any message failed, or a whole-chunk error when
// kafka-go sent nothing (or ctx ended).
//
// Calls are sent one at a time, and each sets the Writer's BatchSize to
// its chunk's length first: kafka-go allocates a slice of BatchSize
// messages (152 bytes each) for every partition batch it starts, however
// few messages the batch gets (writer.go writeBatch.add; kafka-go PR
// #1193). kafka-go reads BatchSize only in the calling goroutine
// (batchMessages, then partitionWriter.writeMessages), so setting it under
// the semaphore is safe. One Writer, not one per size: when ctx ends a
// call, kafka-go keeps its batch queued and retries it; the next call's
// batch for that partition then queues behind it in the same partition
// writer, so a late copy never lands after later messages of its key. With Writers of
// several sizes it could (a later call through another Writer was
// written first). With concurrent calls on one Writer, kafka-go could also
// put part of one call in another call's produce request.
func (p *Publisher) write(ctx context.Context, chunk []kafkago.Message, fail func(int, error)) (bool, error) {
	select {
	case p.writing <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-p.writing }()
	if p.idem != nil {
		return p.idem.write(ctx, chunk, fail)
	}
	failed := false
	// Each round either succeeds, fails as a whole, or drops one message that
	// kafka-go found too large, so this loop ends.
	for len(chunk) > 0 {
		p.w.BatchSize = len(chunk)
		err := p.w.WriteMessages(ctx, chunk...)
		if err == nil {
			return failed, nil
		}
		var werrs kafkago.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(chunk) {
			for j, e := range werrs {
				if e != nil {
					fail(chunk[j].WriterData.(int), p.explain(chunk[j].Topic, e))
					failed = true
				}
			}
			return failed, nil
		}
		var tooLarge kafkago.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			// Not expected: Publish pre-checks sizes with kafka-go's formula.
			// kafka-go rejected the whole call without sending anything.
			i, ok := tooLarge.Message.WriterData.(int)
			if !ok {
				return failed, err
			}
			fail(i, fmt.Errorf("message exceeds Config.BatchBytes %d: %w", p.cfg.BatchBytes, err))
			failed = true
			chunk = tooLarge.Remaining
			continue
		}
		if errors.Is(err, io.ErrClosedPipe) {
			err = errClosed
		}
		return failed, err
	}
	return failed, nil
}

// Close stops the writer and closes broker connections. It first cuts every
// connection, so a produce request in flight fails at once (its messages are
// reported as not delivered to their Publish call) instead of being waited
// for; Close is therefore bounded by kafka-go's retry backoff (about a
// second), not by WriteTimeout. Later Publish, Ping and CheckTopics calls
// fail with errClosed. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		// Cut connections first so a request stuck on a dead broker fails
		// now instead of after its write timeouts; no new ones are dialed.
		p.conns.closeAll()
		if err := p.w.Close(); err != nil {
			p.closeErr = fmt.Errorf("close: %w", err)
		}
		p.transport.close()
		p.log.Info("publisher closed")
	})
	return p.closeErr
}
