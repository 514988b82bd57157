package produce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metadataTopics records the topic names of every Metadata request the
// cluster receives, and whether it allowed auto-creation.
type metadataTopics struct {
	mu    sync.Mutex
	names map[string]bool // topic -> auto-creation allowed in some request
}

func watchMetadata(c *kfake.Cluster) *metadataTopics {
	m := &metadataTopics{names: map[string]bool{}}
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.MetadataRequest)
		m.mu.Lock()
		for _, t := range req.Topics {
			if t.Topic != nil {
				m.names[*t.Topic] = m.names[*t.Topic] || req.AllowAutoTopicCreation
			}
		}
		m.mu.Unlock()
		return nil, nil, false
	})
	return m
}

func (m *metadataTopics) requested(topic string) (requested, autoCreate bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	auto, ok := m.names[topic]
	return ok, auto
}

// topicExists asks the cluster with franz-go, never auto-creating.
func topicExists(t *testing.T, addrs []string, topic string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) > 0
}

func TestCheckTopics(t *testing.T) {
	// The cluster would create topics on request: CheckTopics must not
	// ask it to unless Config.AutoCreateTopic is set.
	b, topic := newFakeBroker(t, 3, kfake.AllowAutoTopicCreation())
	createTopic(t, b.addrs, topic, 3)
	other := topic + "-other"
	createTopic(t, b.addrs, other, 1)
	md := watchMetadata(b.cluster)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
	ctx := context.Background()

	t.Run("existing", func(t *testing.T) {
		if err := p.CheckTopics(ctx, topic, other); err != nil {
			t.Fatalf("CheckTopics(%s, %s) = %v", topic, other, err)
		}
		if err := p.CheckTopics(ctx); err != nil {
			t.Fatalf("CheckTopics() (Config.Topic) = %v", err)
		}
	})

	t.Run("missing", func(t *testing.T) {
		missing := topic + "-missing"
		err := p.CheckTopics(ctx, missing)
		var mt *missingTopicError
		if !errors.As(err, &mt) || !isMissingTopic(err) {
			t.Fatalf("CheckTopics(%s) = %v, want *missingTopicError", missing, err)
		}
		t.Logf("missing: %v", err)
		if len(mt.Topics) != 1 || mt.Topics[0] != missing || mt.Broker != b.addrs[0] || mt.AutoCreate {
			t.Errorf("missingTopicError = %+v", mt)
		}
		want := `check topics: kafka: topic "` + missing + `" does not exist (broker ` + b.addrs[0] +
			`): create it, or enable Config.AutoCreateTopic (outbox-relay: --kafka-auto-create-topics)`
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error text\n%s\nwant prefix\n%s", err, want)
		}
		if c, r := classify(err); c != classOutage || r != reasonUnknownTopic {
			t.Errorf("classify = %v, %s", c, r)
		}
		if requested, auto := md.requested(missing); !requested || auto {
			t.Errorf("metadata request for %s: sent %v, auto-creation allowed %v; want sent without", missing, requested, auto)
		}
		if topicExists(t, b.addrs, missing) {
			t.Errorf("CheckTopics created %s", missing)
		}
	})

	t.Run("one of several missing", func(t *testing.T) {
		gone1, gone2 := topic+"-gone1", topic+"-gone2"
		err := p.CheckTopics(ctx, topic, gone1, other, gone2, topic)
		var mt *missingTopicError
		if !errors.As(err, &mt) {
			t.Fatalf("CheckTopics = %v, want *missingTopicError", err)
		}
		t.Logf("one of several missing: %v", err)
		if len(mt.Topics) != 2 || mt.Topics[0] != gone1 || mt.Topics[1] != gone2 {
			t.Errorf("missing topics %q, want [%s %s]", mt.Topics, gone1, gone2)
		}
		if !strings.Contains(err.Error(), `topics "`+gone1+`", "`+gone2+`" do not exist (broker `+b.addrs[0]+`)`) {
			t.Errorf("error text %q", err)
		}
	})

	t.Run("illegal name", func(t *testing.T) {
		err := p.CheckTopics(ctx, topic, "orders eu")
		t.Logf("illegal name: %v", err)
		if !errors.Is(err, errInvalidTopic) || isMissingTopic(err) ||
			!strings.Contains(err.Error(), `topic "orders eu" is an illegal Kafka topic name`) {
			t.Errorf("CheckTopics = %v, want errInvalidTopic naming the topic", err)
		}
		if requested, _ := md.requested("orders eu"); requested {
			t.Error("an illegal topic name was sent to the broker")
		}
	})

	t.Run("auto-create", func(t *testing.T) {
		fresh := topic + "-auto"
		ap := newTestPublisher(t, kafka.Config{Brokers: b.addrs, AutoCreateTopic: true})
		if err := ap.CheckTopics(ctx, fresh, topic); err != nil {
			t.Fatalf("CheckTopics with AutoCreateTopic = %v", err)
		}
		if !topicExists(t, b.addrs, fresh) {
			t.Errorf("%s not created", fresh)
		}
	})

	t.Run("auto-create answered unknown at first", func(t *testing.T) {
		// Kafka 4.x answers the request that starts a topic's creation
		// with UNKNOWN_TOPIC_OR_PARTITION; the topic exists a moment
		// later. The first auto-creating request is answered so, the
		// next ones as usual (kfake creates the topic then).
		fresh := topic + "-slow"
		b.cluster.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.MetadataRequest)
			if !req.AllowAutoTopicCreation {
				return nil, nil, false // kept for the next request
			}
			resp := req.ResponseKind().(*kmsg.MetadataResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewMetadataResponseTopic()
				st.Topic = rt.Topic
				st.ErrorCode = kerr.UnknownTopicOrPartition.Code
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		ap := newTestPublisher(t, kafka.Config{Brokers: b.addrs, AutoCreateTopic: true})
		if err := ap.CheckTopics(ctx, fresh); err != nil {
			t.Fatalf("CheckTopics with AutoCreateTopic, the first answer unknown = %v, want nil (the broker created it)", err)
		}
		if !topicExists(t, b.addrs, fresh) {
			t.Errorf("%s not created", fresh)
		}
	})

	t.Run("broker refuses auto-create", func(t *testing.T) {
		nb, _ := newFakeBroker(t, 1)
		ap := newTestPublisher(t, kafka.Config{Brokers: nb.addrs, AutoCreateTopic: true})
		err := ap.CheckTopics(ctx, "never")
		t.Logf("broker refuses auto-create: %v", err)
		var mt *missingTopicError
		if !errors.As(err, &mt) || !mt.AutoCreate || !strings.Contains(err.Error(), "did not create it on request") {
			t.Errorf("CheckTopics = %v, want *missingTopicError saying the broker did not create it", err)
		}
	})

	t.Run("not authorized", func(t *testing.T) {
		b.cluster.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.MetadataRequest)
			resp := req.ResponseKind().(*kmsg.MetadataResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewMetadataResponseTopic()
				st.Topic = rt.Topic
				st.ErrorCode = kerr.TopicAuthorizationFailed.Code
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		err := p.CheckTopics(ctx, topic)
		t.Logf("not authorized: %v", err)
		if !errors.Is(err, kafkago.TopicAuthorizationFailed) || !strings.Contains(err.Error(), `topic "`+topic+`"`) {
			t.Errorf("CheckTopics = %v, want TOPIC_AUTHORIZATION_FAILED naming the topic", err)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		up := newTestPublisher(t, kafka.Config{Brokers: []string{freePort(t)}, DialTimeout: time.Second})
		err := up.CheckTopics(ctx, topic)
		if err == nil || isMissingTopic(err) || !IsOutage(err) {
			t.Errorf("CheckTopics = %v, want an unreachable error", err)
		}
	})

	t.Run("closed", func(t *testing.T) {
		cp := newTestPublisher(t, kafka.Config{Brokers: b.addrs})
		if err := cp.Close(); err != nil {
			t.Fatal(err)
		}
		if err := cp.CheckTopics(ctx, topic); !errors.Is(err, errClosed) {
			t.Errorf("CheckTopics after Close = %v", err)
		}
	})
}

// TestPublishTopicErrors: an illegal topic name fails its messages before
// anything is sent, as a rejection; a missing topic fails as retriable,
// naming the topic; INVALID_TOPIC_EXCEPTION from the broker is a rejection.
func TestPublishTopicErrors(t *testing.T) {
	b, topic := newFakeBroker(t, 2)
	md := watchMetadata(b.cluster)
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: topic})
	ctx := context.Background()

	t.Run("illegal", func(t *testing.T) {
		msgs := testMessages(6, []string{"a", "b"})
		bad := "orders/eu"
		msgs[1].Topic, msgs[4].Topic = bad, bad
		err := p.Send(ctx, msgs)
		var pe *PublishError
		if !errors.As(err, &pe) || len(pe.Errs) != len(msgs) {
			t.Fatalf("Publish = %v, want *PublishError", err)
		}
		for i, e := range pe.Errs {
			if (i == 1 || i == 4) != (e != nil) {
				t.Errorf("Errs[%d] = %v", i, e)
			}
		}
		e := pe.Errs[1]
		t.Logf("illegal topic: %v", e)
		if !errors.Is(e, kafkago.InvalidTopic) || !IsRecordRejected(e) || IsRetriable(e) || ErrorReason(e) != reasonInvalidTopic {
			t.Errorf("Errs[1] = %v, want a rejection wrapping InvalidTopic", e)
		}
		if want := `topic "orders/eu" is an illegal Kafka topic name: '/' at byte 6`; !strings.Contains(e.Error(), want) {
			t.Errorf("Errs[1] = %q, want it to contain %q", e, want)
		}
		if requested, _ := md.requested(bad); requested {
			t.Error("the illegal topic was sent to the broker")
		}
		consume(t, b.addrs, topic, 4)

		// Config.Topic itself illegal: every message of the call fails alone.
		ip := newTestPublisher(t, kafka.Config{Brokers: b.addrs, Topic: ".."})
		err = ip.Send(ctx, testMessages(2, []string{"a"}))
		if !errors.As(err, &pe) || pe.Failed() != 2 || !IsRecordRejected(pe.Errs[0]) {
			t.Errorf("Publish with Config.Topic %q = %v", "..", err)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		missing := topic + "-missing"
		msgs := testMessages(2, []string{"a"})
		msgs[0].Topic, msgs[1].Topic = missing, missing
		err := p.Send(ctx, msgs)
		if !errors.Is(err, kafkago.UnknownTopicOrPartition) || !IsRetriable(err) || ErrorReason(err) != reasonUnknownTopic {
			t.Fatalf("Publish = %v, want retriable UNKNOWN_TOPIC_OR_PARTITION", err)
		}
		t.Logf("unknown topic: %v", err)
		if !strings.Contains(err.Error(), `topic "`+missing+`" not found`) {
			t.Errorf("error %q does not name the topic", err)
		}
		// Mixed with a good topic: only the missing topic's messages fail,
		// each naming the topic.
		msgs = testMessages(3, []string{"a"})
		msgs[1].Topic = missing
		err = p.Send(ctx, msgs)
		var pe *PublishError
		if !errors.As(err, &pe) || pe.Failed() != 1 || !strings.Contains(pe.Errs[1].Error(), `topic "`+missing+`"`) {
			t.Errorf("Publish = %v", err)
		}
	})

	t.Run("invalid from broker", func(t *testing.T) {
		failProduce(b.cluster, topic, 0, kerr.InvalidTopicException.Code)
		msgs := testMessages(20, []string{"k1", "k2", "k3", "k4", "k5"})
		err := p.Send(ctx, msgs)
		var pe *PublishError
		if !errors.As(err, &pe) {
			t.Fatalf("Publish = %v", err)
		}
		n := 0
		for i, e := range pe.Errs {
			if Partition(msgs[i].Key, 2) != 0 {
				continue
			}
			n++
			if !IsRecordRejected(e) || ErrorReason(e) != reasonInvalidTopic {
				t.Errorf("Errs[%d] = %v, want rejected invalid_topic", i, e)
			}
		}
		if n == 0 {
			t.Fatal("no message on partition 0")
		}
	})
}

// The metadata request that explains a failed publish (the describer) must
// not create the topic: after a publish failed on a topic that was
// deleted, on a broker that creates topics on request (Kafka's default),
// kafka-go's Conn.ReadPartitions, which it used, created the topic again
// with the broker's default partition count, behind the operator's back
// (TestRealKafka/TopicRecreated found it: its own CreateTopic failed with
// TOPIC_ALREADY_EXISTS).
func TestDescribeDoesNotCreateTheTopic(t *testing.T) {
	t.Parallel()
	b, _ := newFakeBroker(t, 1, kfake.AllowAutoTopicCreation())
	p := newTestPublisher(t, kafka.Config{Brokers: b.addrs})
	missing := fmt.Sprintf("deleted-%d", time.Now().UnixNano())
	info, err := p.describe.topic(context.Background(), missing)
	if err == nil && info != nil && len(info.partitions) > 0 {
		t.Errorf("describe found %d partitions of a topic that does not exist", len(info.partitions))
	}
	if topicExists(t, b.addrs, missing) {
		t.Fatalf("describing a missing topic created it")
	}
	t.Logf("describe of a missing topic: %v", err)
}
