package faults

import (
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// TestInprocLeaderMovesUnderLoad: writers commit about 500 events/s while
// every partition's leader moves to another of 3 brokers, 5 times, 3 s
// apart (a rolling broker restart, a reassignment). Each move makes the
// old leader answer NOT_LEADER_OR_FOLLOWER; before, the producer learned
// the new leader only when its metadata cache (6 s) expired, stalling its
// partitions up to 7 s per move. After each move the relay must publish
// again within 1 s, and everything arrive in per-aggregate order.
func TestInprocLeaderMovesUnderLoad(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	k := testenv.KafkaCluster(t, 3)
	const partitions = 4
	topic := k.Topic(t, partitions)
	prog := &ipProgress{}
	h := ipStartRelay(t, db, k.Brokers, topic, ipConfig{OnPublished: prog.observe})
	load := ipStartRateLoad(t, db.Pool, writer(t, db.Pool), "agg", 500, 1, 40, 4)
	testenv.Eventually(t, 15*time.Second, func() bool { return prog.published.Load() >= 200 }, "nothing published before the moves")
	var worst time.Duration
	for move := 0; move < 5; move++ {
		for p := int32(0); p < partitions; p++ {
			k.MoveLeader(t, topic, p)
		}
		moved := time.Now()
		// 100 events: at 500 events/s, 0.2 s of writes after the move. The
		// 1 s is the relay's: it runs from when the writers, slower on a
		// loaded machine, had committed the 100.
		want, wrote := prog.published.Load()+100, load.committed.Load()+100
		if !ipWait(time.Minute, func() bool { return load.committed.Load() >= wrote }) {
			t.Fatalf("move %d: the writers did not commit 100 events within a minute", move+1)
		}
		written := time.Since(moved)
		within := max(time.Second+200*time.Millisecond, written+time.Second)
		if !ipWait(within-time.Since(moved), func() bool { return prog.published.Load() >= want }) {
			t.Fatalf("move %d: fewer than 100 events published within %s of the leader move (the writers committed them %s after it; relay stats %+v)",
				move+1, within.Round(time.Millisecond), written.Round(time.Millisecond), h.Relay.Stats())
		}
		worst = max(worst, time.Since(moved))
		time.Sleep(3 * time.Second)
	}
	load.Stop()
	testenv.Eventually(t, 30*time.Second, func() bool { return ipUnpublished(t, db.Pool) == 0 }, "backlog not drained (stats %+v)", h.Relay.Stats())
	t.Logf("5 leader moves of %d partitions: 100 events published at most %s after a move; %d events committed; relay stats %+v",
		partitions, worst.Round(10*time.Millisecond), load.committed.Load(), h.Relay.Stats())
	checkTopic(t, db.Pool, k.Brokers, topic, "leader moves under load", 60*time.Second)
}
