package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/checker"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
	"github.com/pgoutbox/outbox/relay"
)

// ipPoisonLayout writes, in one transaction and in this seq order: the
// poison event of each of the poison aggregates "poison-0".. (made by
// poison), then rounds of one event for every aggregate, poison aggregates
// included (their followers) and the healthy aggregates "ok-0"... It
// returns the poison events.
func ipPoisonLayout(t *testing.T, pool *pgxpool.Pool, poisonAggs, okAggs, rounds int, poison func(agg string) outbox.Event) []outbox.Event {
	t.Helper()
	var evs, poisons []outbox.Event
	for p := 0; p < poisonAggs; p++ {
		e := poison(fmt.Sprintf("poison-%d", p))
		poisons = append(poisons, e)
		evs = append(evs, e)
	}
	for r := 1; r <= rounds; r++ {
		for p := 0; p < poisonAggs; p++ {
			evs = append(evs, ipEvent(fmt.Sprintf("poison-%d", p), r))
		}
		for a := 0; a < okAggs; a++ {
			evs = append(evs, ipEvent(fmt.Sprintf("ok-%d", a), r))
		}
	}
	ipInsert(t, pool, writer(t, pool), evs...)
	return poisons
}

func ipIDStrings(evs []outbox.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID.String()
	}
	return ids
}

// ipCheckTopics runs the checker for each topic against the table's rows
// routed there (rows whose topic column is NULL go to defaultTopic), logs
// one matrix row with the sums and fails the test unless every report is OK.
func ipCheckTopics(t *testing.T, pool *pgxpool.Pool, brokers []string, defaultTopic string, topics []string, fault string) checker.Report {
	t.Helper()
	ctx := context.Background()
	all, err := checker.ExpectedFromTable(ctx, pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	var sum checker.Report
	for _, topic := range topics {
		var ids []uuid.UUID
		rows, err := pool.Query(ctx, "SELECT id FROM outbox WHERE coalesce(topic, $1) = $2", defaultTopic, topic)
		if err != nil {
			t.Fatal(err)
		}
		in := map[uuid.UUID]bool{}
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			in[id] = true
			ids = append(ids, id)
		}
		rows.Close()
		var exp []checker.Expected
		for _, e := range all {
			if in[e.ID] {
				exp = append(exp, e)
			}
		}
		obs, err := checker.ObserveTopic(ctx, brokers, topic, len(exp), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := checker.Check(exp, obs)
		if !r.OK() {
			t.Errorf("checker, topic %s: %v", topic, r)
		}
		sum.Committed += r.Committed
		sum.Delivered += r.Delivered
		sum.Lost += r.Lost
		sum.Duplicates += r.Duplicates
		sum.OrderViolations += r.OrderViolations
		sum.Phantoms += r.Phantoms
		sum.PayloadMismatches += r.PayloadMismatches
	}
	matrixRow(t, fault, sum)
	return sum
}

// ipDeadLetters returns the dead-lettered events' attempts and last errors.
func ipDeadLetters(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]struct {
	attempts int
	lastErr  string
} {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id, attempts, coalesce(last_error, '') FROM outbox WHERE dead_lettered_at IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]struct {
		attempts int
		lastErr  string
	}{}
	for rows.Next() {
		var id uuid.UUID
		var d struct {
			attempts int
			lastErr  string
		}
		if err := rows.Scan(&id, &d.attempts, &d.lastErr); err != nil {
			t.Fatal(err)
		}
		out[id] = d
	}
	return out
}

// TestInprocPoisonOversizedDeadLetteredAtOnce: a broker whose
// message.max.bytes (4000) is below the relay's write limit; the first event
// of three aggregates is a 6000-byte payload, at the head of the first
// batches. The broker rejects every record batch that holds one; the relay
// retries the batch record by record, dead-letters the oversized events at
// once (a rejected record cannot succeed unchanged) and holds their
// aggregates' later events, while the other aggregates flow. Once the cause
// is fixed (the topic's max.message.bytes raised), a requeue delivers the
// dead letters and their held followers in order.
func TestInprocPoisonOversizedDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4000"}))
	topic := k.Topic(t, 2)
	big := json.RawMessage(fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 6000)))
	poisons := ipPoisonLayout(t, db.Pool, 3, 6, 4, func(agg string) outbox.Event {
		return outbox.Event{ID: outbox.NewID(), AggregateID: agg, Type: "fault.big", Payload: big}
	})
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay: relay.Config{RetryMin: 50 * time.Millisecond, MaxAttempts: 5, PollInterval: 100 * time.Millisecond},
		Lease: lease.Config{BatchSize: 10},
	})
	testenv.Eventually(t, 20*time.Second, func() bool { return h.Relay.Stats().DeadLettered == int64(len(poisons)) }, "the oversized events were not dead-lettered")
	// The healthy aggregates are all through; the poisoned ones are held.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'ok-%' AND published_at IS NULL") == 0
	}, "the healthy aggregates did not flow past the poison events")
	if n := ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'poison-%' AND published_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d events of poisoned aggregates published past their dead letter (hold)", n)
	}
	dead := ipDeadLetters(t, db.Pool)
	for _, p := range poisons {
		d, ok := dead[p.ID]
		if !ok || d.attempts != 1 || !strings.Contains(strings.ToLower(d.lastErr), "too large") {
			t.Fatalf("poison %s: dead-lettered %v, attempts %d, last_error %q; want dead-lettered at once as too large", p.ID, ok, d.attempts, d.lastErr)
		}
	}
	if len(dead) != len(poisons) {
		t.Fatalf("%d dead letters, want only the %d oversized events", len(dead), len(poisons))
	}

	// Fix the cause: raise the topic's limit.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "max.message.bytes"
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	cfg.Value = kmsg.StringPtr("1048588")
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, k.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("raise max.message.bytes: %v", err)
		}
	}
	if n, err := h.Claimer.Requeue(ctx, nil); err != nil || n != int64(len(poisons)) {
		t.Fatalf("requeue: %d, %v", n, err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "not everything published after the requeue")
	checkTopic(t, db.Pool, k.Brokers, topic, "poison: 3 events over message.max.bytes, then requeued", 20*time.Second)
}

// TestInprocPoisonRetriedUntilMaxAttempts: three aggregates' first events go
// to a topic on which the broker answers every produce request with
// UNKNOWN_SERVER_ERROR (an error no rule knows: neither a condition of the
// cluster nor a rejection of the record, so every failure counts). They
// are retried with backoff, at the head of the claims, while every other
// aggregate flows; after MaxAttempts they are dead-lettered with their
// attempts and last error, their followers held. Once the broker is
// healthy, requeue delivers them and then their followers.
func TestInprocPoisonRetriedUntilMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic := k.Topic(t, 2)
	sick := k.Topic(t, 1)
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: sick, Err: kerr.UnknownServerError, Count: -1})
	poisons := ipPoisonLayout(t, db.Pool, 3, 6, 4, func(agg string) outbox.Event {
		e := ipEvent(agg, 0)
		e.Topic = sick
		return e
	})
	const maxAttempts = 5
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		// 200ms doubling: the poison events are retried for about 3s.
		Relay: relay.Config{RetryMin: 200 * time.Millisecond, RetryMax: 2 * time.Second, MaxAttempts: maxAttempts, PollInterval: 50 * time.Millisecond},
		Lease: lease.Config{BatchSize: 10},
		Kafka: func(c *kafka.Config) { c.MaxAttempts = 1 },
	})
	// Others flow while the poison events are still being retried.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'ok-%' AND published_at IS NULL") == 0
	}, "the healthy aggregates did not flow past the poison events")
	if n := ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL"); n != 0 {
		t.Logf("note: %d poison events were already dead-lettered when the healthy aggregates were through", n)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return h.Relay.Stats().DeadLettered == int64(len(poisons)) }, "the poison events were not dead-lettered after %d attempts", maxAttempts)
	dead := ipDeadLetters(t, db.Pool)
	for _, p := range poisons {
		d, ok := dead[p.ID]
		if !ok || d.attempts != maxAttempts || !strings.Contains(d.lastErr, "UNKNOWN_SERVER_ERROR") {
			t.Fatalf("poison %s: dead-lettered %v, attempts %d, last_error %q; want dead-lettered after %d attempts", p.ID, ok, d.attempts, d.lastErr, maxAttempts)
		}
	}
	if len(dead) != len(poisons) {
		t.Fatalf("%d dead letters, want only the %d poison events", len(dead), len(poisons))
	}
	if n := ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'poison-%' AND published_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d followers of dead letters published (hold)", n)
	}
	t.Logf("fault answered %d produce requests; relay stats %+v", fault.Hits(), h.Relay.Stats())

	fault.Remove()
	if n, err := h.Claimer.Requeue(ctx, ipIDStrings(poisons)); err != nil || n != int64(len(poisons)) {
		t.Fatalf("requeue: %d, %v", n, err)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "not everything published after the requeue")
	// The followers went out after their (requeued) first event: the
	// checker below reads the topics and fails on any aggregate whose
	// events arrived out of order. (Not published_at: it is when the mark
	// ran, and the marks of two batches may run on two connections in
	// either order; comparing it failed 3 runs in 15 while Kafka's order
	// was right.)
	ipCheckTopics(t, db.Pool, k.Brokers, topic, []string{topic, sick}, "poison: 3 events failing (UNKNOWN_SERVER_ERROR) until max attempts (5), then requeued")
}

// TestInprocPoisonEventForMissingTopic: a plain-SQL writer routes the first
// event of three aggregates to a topic that does not exist (and is not
// auto-created). The broker says UNKNOWN_TOPIC_OR_PARTITION: a condition of
// the cluster (the topic may still be created), not of the events. Those
// events wait, counting no attempt and never dead-lettered (before, they
// were dead-lettered after MaxAttempts and their followers held until a
// requeue), while the other aggregates in the same claims keep flowing.
// Once the topic exists they are published, then their followers, without
// anyone's help.
func TestInprocPoisonEventForMissingTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 2)
	missing := "missing-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	poisons := ipPoisonLayout(t, db.Pool, 3, 6, 4, func(agg string) outbox.Event {
		e := ipEvent(agg, 0)
		e.Topic = missing
		return e
	})
	const maxAttempts = 3
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay: relay.Config{RetryMin: 100 * time.Millisecond, RetryMax: time.Second, MaxAttempts: maxAttempts, PollInterval: 50 * time.Millisecond},
		Lease: lease.Config{BatchSize: 10},
		Kafka: func(c *kafka.Config) { c.MaxAttempts = 1 },
	})
	testenv.Eventually(t, 15*time.Second, func() bool {
		return ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'ok-%' AND published_at IS NULL") == 0
	}, "the healthy aggregates did not flow past the events for the missing topic")
	// Well past MaxAttempts' worth of retries (100 ms doubling to 1 s).
	testenv.Eventually(t, 60*time.Second, func() bool { return h.Relay.Stats().Failed >= 3*maxAttempts*int64(len(poisons)) },
		"the events for the missing topic were not retried (stats %+v)", h.Relay.Stats())
	if n := ipCount(t, db.Pool, "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d events dead-lettered because their topic does not exist yet", n)
	}
	if n := ipCount(t, db.Pool, "SELECT coalesce(max(attempts), 0) FROM outbox"); n != 0 {
		t.Fatalf("an event counted %d attempts because its topic does not exist yet", n)
	}

	// Fix the cause: create the topic.
	creq := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic = missing
	ct.NumPartitions = 1
	ct.ReplicationFactor = -1
	creq.Topics = append(creq.Topics, ct)
	cresp, err := creq.RequestWith(ctx, k.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range cresp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create topic %s: %v", missing, err)
		}
	}
	// kafka-go caches the topic's missing metadata for up to its
	// MetadataTTL (6s).
	testenv.Eventually(t, 60*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 },
		"not everything published after the topic was created")
	ipCheckTopics(t, db.Pool, k.Brokers, topic, []string{topic, missing}, "3 events for a missing topic, then created")
}

// TestInprocFollowerNotPublishedAheadOfFailedEvent: an aggregate's first
// event goes to a topic whose produce requests fail (NOT_ENOUGH_REPLICAS,
// retriable), its second event to the relay's topic. Per-aggregate order
// ("if an event fails, the later events of its aggregate in flight are
// neither published nor marked") means the second event must not appear on
// Kafka while the first has not been delivered. Both are in one claim and
// one Publish call; kafka-go sends each topic-partition's batch on its own,
// so only the first fails.
func TestInprocFollowerNotPublishedAheadOfFailedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaFake(t)
	topic := k.Topic(t, 1)
	sick := k.Topic(t, 1)
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: sick, Err: kerr.NotEnoughReplicas, Count: -1})
	first := ipEvent("agg", 1)
	first.Topic = sick
	second := ipEvent("agg", 2)
	ipInsert(t, db.Pool, writer(t, db.Pool), first, second)
	obs, err := checker.NewObserver(ctx, k.Brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Stop()
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{
		Relay: relay.Config{RetryMin: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxAttempts: 1000, PollInterval: 50 * time.Millisecond},
		Kafka: func(c *kafka.Config) { c.MaxAttempts = 1 },
	})
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := fault.Wait(wctx, 3); err != nil {
		t.Fatalf("the failing topic saw %d produce requests: %v", fault.Hits(), err)
	}
	// Up to date with what the broker holds now.
	if err := obs.WaitCaughtUp(wctx); err != nil {
		t.Fatal(err)
	}
	bug := ""
	if n := obs.Records(); n != 0 {
		bug = fmt.Sprintf("the aggregate's second event is on Kafka %d times while its first event has failed %d times and was never delivered: "+
			"relay.publishBatch sends the whole chunk in one Publish call and only declines to mark a later event whose earlier event failed "+
			"(\"Delivered, but an earlier event of its aggregate in this chunk failed\"); with per-row topics the two are separate produce "+
			"requests, so the later event is published ahead (and again after every retry)", n, fault.Hits())
	}
	fault.Remove()
	testenv.Eventually(t, 20*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "not delivered after the fault ended")
	t.Logf("relay stats %+v", h.Relay.Stats())
	ipCheckTopics(t, db.Pool, k.Brokers, topic, []string{topic, sick}, "first event of an aggregate failing on another topic")
	if bug != "" {
		ipBug(t, "%s", bug)
	}
}
