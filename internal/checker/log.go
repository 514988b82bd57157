package checker

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadLog reads every record of topic as it lies in the log: read
// uncommitted, so records of aborted transactions are included (a
// consumer that reads uncommitted sees them, and a compacted topic keeps
// them until compaction), or, committed, as a read_committed consumer
// reads it; up to the end offsets the partitions have when it is called
// (their last stable offsets must reach them: no transaction open).
// Records are in offset order within each partition.
func ReadLog(ctx context.Context, brokers []string, topic string, committed bool) ([]Observed, error) {
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords(), kgo.ClientID("outbox-checker-log"))
	if err != nil {
		return nil, fmt.Errorf("checker: log reader: %w", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("checker: end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []Observed
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("checker: %s not read to its end offsets (%v left): %w", topic, left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			ob := Observed{Key: string(r.Key), Value: r.Value, Partition: r.Partition, Offset: r.Offset}
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					ob.EventID = string(h.Value)
				}
			}
			out = append(out, ob)
		})
	}
	return out, nil
}

// LogOrder counts the records of observed (the whole log, ReadLog) that
// break an aggregate's order in the log itself, not only in first copies:
// walking an aggregate's records in log order, each must be its event
// just after the one before it, or an earlier event (a copy sent again
// from there on: at-least-once), never one further ahead; and its last
// record must be its last event. So a late copy that lands after later
// events (a paused relay's request) counts, whether followed by later
// events (a skip forward) or not (the wrong last value of a compacted
// topic); a replay of a run of events does not. It returns the count and
// a few examples.
func LogOrder(expected []Expected, observed []Observed) (int, []string) {
	type pos struct {
		agg string
		i   int
	}
	byAgg := map[string][]Expected{}
	for _, e := range expected {
		byAgg[e.AggregateID] = append(byAgg[e.AggregateID], e)
	}
	at := map[string]pos{}
	for agg, es := range byAgg {
		sort.Slice(es, func(i, j int) bool { return es[i].Seq < es[j].Seq })
		for i, e := range es {
			at[e.ID.String()] = pos{agg, i}
		}
	}
	obs := append([]Observed(nil), observed...)
	sort.SliceStable(obs, func(i, j int) bool {
		if obs[i].Partition != obs[j].Partition {
			return obs[i].Partition < obs[j].Partition
		}
		return obs[i].Offset < obs[j].Offset
	})
	var examples []string
	n := 0
	prev := map[string]int{}
	prevOff := map[string]int64{}
	for _, o := range obs {
		p, ok := at[o.EventID]
		if !ok {
			continue
		}
		last, seen := prev[p.agg]
		if !seen {
			last = -1
		}
		if p.i > last+1 {
			n++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("aggregate %q: event %d of its events at partition %d offset %d follows event %d (offset %d)",
					p.agg, p.i, o.Partition, o.Offset, last, prevOff[p.agg]))
			}
		}
		prev[p.agg], prevOff[p.agg] = p.i, o.Offset
	}
	for agg, last := range prev {
		if want := len(byAgg[agg]) - 1; last != want {
			n++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("aggregate %q: its last record (offset %d) is event %d, not its last event %d", agg, prevOff[agg], last, want))
			}
		}
	}
	return n, examples
}
