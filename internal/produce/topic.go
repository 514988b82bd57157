package produce

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/pgoutbox/outbox"
)

// validateTopic is outbox.ValidateTopic's error wrapping errInvalidTopic
// (kafka-go's InvalidTopic). Publish applies it to every message before
// sending, so an event with an illegal topic fails alone, as a rejection
// (classify: classRejected, reasonInvalidTopic).
func validateTopic(name string) error {
	if err := outbox.ValidateTopic(name); err != nil {
		return fmt.Errorf("%w: %w", err, briefCode{kafkago.InvalidTopic})
	}
	return nil
}

// briefCode is a kafka-go error code that prints as "[17] Invalid Topic"
// instead of kafka-go's full description, and unwraps to the code.
type briefCode struct{ code kafkago.Error }

func (e briefCode) Error() string { return fmt.Sprintf("[%d] %s", int16(e.code), e.code.Title()) }
func (e briefCode) Unwrap() error { return e.code }

// CheckTopics checks that every topic exists and has partitions; with no
// topics it checks Config.Topic (and returns nil if that is empty). Use it
// at startup: Publish cannot tell a missing topic from one being created
// and keeps retrying it (UNKNOWN_TOPIC_OR_PARTITION is retriable).
//
// It asks Config.Brokers in turn, each on a fresh connection (the
// Publisher's own metadata is a cache), for the topics' metadata, without
// letting the broker create them, unless Config.AutoCreateTopic is set: then
// the request allows auto-creation (Metadata v4+ allow_auto_topic_creation),
// topics the broker reports as being created (LEADER_NOT_AVAILABLE) are
// asked for again with backoff until ctx ends, and topics it still reports
// unknown, for up to 3 s (a broker may answer so while it creates them). The first broker that
// answers decides. Without a ctx deadline it is bounded by
// Config.DialTimeout + Config.WriteTimeout.
//
// It returns nil when every topic exists with partitions. Otherwise its
// error ("check topics: ...") wraps: errInvalidTopic for an illegal name
// (checked before contacting a broker, see outbox.ValidateTopic); a
// *missingTopicError (isMissingTopic) naming the missing topics and the
// broker that answered; the broker's error code for a topic it refused
// otherwise (e.g. TOPIC_AUTHORIZATION_FAILED); or, if no broker answered,
// every broker's connection error (ErrTLS, errAuthentication, network
// errors), as Ping does; errClosed after Close.
func (p *Publisher) CheckTopics(ctx context.Context, topics ...string) error {
	if p.closed.Load() {
		return fmt.Errorf("check topics: %w", errClosed)
	}
	if len(topics) == 0 {
		if p.cfg.Topic == "" {
			return nil
		}
		topics = []string{p.cfg.Topic}
	}
	seen := make(map[string]bool, len(topics))
	uniq := make([]string, 0, len(topics))
	var invalid []error
	for _, t := range topics {
		if seen[t] {
			continue
		}
		seen[t] = true
		uniq = append(uniq, t)
		if err := validateTopic(t); err != nil {
			invalid = append(invalid, err)
		}
	}
	if len(invalid) > 0 {
		return fmt.Errorf("check topics: %w", errors.Join(invalid...))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.DialTimeout+p.cfg.WriteTimeout)
		defer cancel()
	}
	errs := make([]error, 0, len(p.cfg.Brokers))
	for _, b := range p.cfg.Brokers {
		answered, err := p.checkTopicsOn(ctx, b, uniq)
		if err == nil {
			return nil
		}
		if answered {
			return fmt.Errorf("check topics: %w", err)
		}
		errs = append(errs, fmt.Errorf("broker %s: %w", b, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("check topics: %w", errors.Join(errs...))
}

// checkTopicsOn asks broker for the topics' metadata until none is being
// created. answered reports whether the broker answered (err is then about
// the topics); otherwise err is why it could not be asked.
func (p *Publisher) checkTopicsOn(ctx context.Context, broker string, topics []string) (answered bool, err error) {
	backoff := 100 * time.Millisecond
	began := time.Now()
	for {
		creating, answered, err := p.topicMetadata(ctx, broker, topics)
		if !answered || len(creating) == 0 {
			return answered, err
		}
		if err != nil && time.Since(began) >= autoCreateWait {
			// Still unknown after autoCreateWait: the broker did not
			// create them (err is the *missingTopicError).
			return true, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if err != nil {
				return true, err
			}
			return true, fmt.Errorf("topics %q are being created (LEADER_NOT_AVAILABLE) and were not ready in time: %w",
				creating, kafkago.LeaderNotAvailable)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// autoCreateWait is how long CheckTopics, with Config.AutoCreateTopic,
// asks again for a topic the broker still reports unknown: a broker that
// creates topics on request may answer UNKNOWN_TOPIC_OR_PARTITION to the
// request that starts the creation (Kafka 4.x in KRaft mode does, for
// under a second here), so only a topic still unknown after this long
// is one the broker did not create.
const autoCreateWait = 3 * time.Second

// topicMetadata asks broker once, on a fresh kafka-go Transport (whose
// first metadata request, made by its discover goroutine for exactly these
// topics and without auto-creation, answers a Metadata request served from
// its cache; with AllowAutoTopicCreation kafka-go sends our request itself
// for topics that cache does not know: transport.go connPool.roundTrip).
// It returns the topics reported as being created.
func (p *Publisher) topicMetadata(ctx context.Context, broker string, topics []string) (creating []string, answered bool, err error) {
	t := p.newTransport(p.dialer.dialConn, topics)
	defer t.CloseIdleConnections()
	r, err := t.RoundTrip(ctx, kafkago.TCP(broker), &metadataAPI.Request{
		TopicNames:             topics,
		AllowAutoTopicCreation: p.cfg.AutoCreateTopic,
	})
	if err != nil {
		return nil, false, p.explain("", err)
	}
	resp, ok := r.(*metadataAPI.Response)
	if !ok {
		return nil, false, fmt.Errorf("unexpected metadata response %T", r)
	}
	byName := make(map[string]*metadataAPI.ResponseTopic, len(resp.Topics))
	for i := range resp.Topics {
		byName[resp.Topics[i].Name] = &resp.Topics[i]
	}
	var missing []string
	var errs []error
	for _, name := range topics {
		rt := byName[name]
		switch {
		case rt == nil:
			missing = append(missing, name)
		case rt.ErrorCode == 0 && len(rt.Partitions) > 0:
		case rt.ErrorCode == 0, rt.ErrorCode == int16(kafkago.UnknownTopicOrPartition):
			missing = append(missing, name)
		case rt.ErrorCode == int16(kafkago.LeaderNotAvailable):
			creating = append(creating, name)
		default:
			errs = append(errs, fmt.Errorf("topic %q: %w", name, briefCode{kafkago.Error(rt.ErrorCode)}))
		}
	}
	if len(missing) > 0 {
		errs = append([]error{&missingTopicError{Topics: missing, Broker: broker, AutoCreate: p.cfg.AutoCreateTopic}}, errs...)
		if p.cfg.AutoCreateTopic {
			// Asked to create them: they may be on their way
			// (autoCreateWait); the caller asks again.
			creating = append(creating, missing...)
		}
	}
	if len(errs) > 0 {
		if !p.cfg.AutoCreateTopic {
			creating = nil // nothing of errs is asked for again
		}
		return creating, true, errors.Join(errs...)
	}
	return creating, true, nil
}
