package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// promSample is one line of the Prometheus text format: a series (name
// and labels as printed, e.g. `outbox_relay_wakeups_total{cause="poll"}`)
// and its value.
type promSample struct {
	name   string
	labels string
	value  float64
}

// parseProm parses the Prometheus text exposition format, skipping
// comments and lines it cannot read.
func parseProm(r io.Reader) []promSample {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		series, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], line[i+1:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			series, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		name, labels := series, ""
		if i := strings.IndexByte(series, '{'); i >= 0 {
			name, labels = series[:i], series[i:]
		}
		out = append(out, promSample{name: name, labels: labels, value: v})
	}
	return out
}

// promSum returns the sum of every series of metric name whose labels
// contain match ("" matches all), and whether there was one.
func promSum(s []promSample, name, match string) (float64, bool) {
	sum, found := 0.0, false
	for _, p := range s {
		if p.name == name && strings.Contains(p.labels, match) {
			sum += p.value
			found = true
		}
	}
	return sum, found
}

// relayStatsFromProm reads the relay's counters (package metrics' names)
// from a scrape of `outbox-relay run`'s /metrics.
func relayStatsFromProm(s []promSample) relayStats {
	get := func(name, match string) int64 {
		v, _ := promSum(s, name, match)
		return int64(v)
	}
	return relayStats{
		Claims:      get("outbox_relay_claims_total", ""),
		EmptyClaims: get("outbox_relay_empty_claims_total", ""),
		Published:   get("outbox_published_events_total", ""),
		WakeNotify:  get("outbox_relay_wakeups_total", `cause="notify"`),
		WakePoll:    get("outbox_relay_wakeups_total", `cause="poll"`),
		WakeWindow:  get("outbox_relay_wakeups_total", `cause="window"`),
		WakeBacklog: get("outbox_relay_wakeups_total", `cause="backlog"`),
	}
}

// scrape fetches http://addr/metrics.
func scrape(ctx context.Context, addr string) ([]promSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", addr, err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: scrape %s: HTTP %s", addr, resp.Status)
	}
	return parseProm(resp.Body), nil
}

// freeAddr returns a 127.0.0.1 address with a port free right now, for a
// relay process's --metrics-addr.
func freeAddr() (string, error) {
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	// The kernel may hand a port just closed here out again before the
	// relay given it has bound it: relays started back to back then got
	// the same address, and the second exited "address already in use".
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("bench: free port: %w", err)
		}
		addr := ln.Addr().String()
		if err := ln.Close(); err != nil {
			return "", fmt.Errorf("bench: free port: %w", err)
		}
		if !handedOut[addr] {
			handedOut[addr] = true
			return addr, nil
		}
	}
	return "", errors.New("bench: free port: the kernel kept handing out ports given out before")
}

// handedOut are the addresses freeAddr returned; guarded by handedOutMu.
var (
	handedOutMu sync.Mutex
	handedOut   = map[string]bool{}
)

// relayTimings are the raw histogram sums (seconds) and counts of a relay
// process's /metrics that RelayTimings is computed from.
type relayTimings struct {
	ok                         bool
	claimSum, claimN           float64
	claimRowsSum, claimRowsN   float64
	batchSum, batchN           float64
	markSum, markN             float64
	produceSum, produceN       float64
	produceUnder5ms            float64
	publishLatSum, publishLatN float64
}

// relayTimingsFromProm reads the histograms RelayTimings needs from a
// scrape (package metrics' names).
func relayTimingsFromProm(s []promSample) relayTimings {
	get := func(name, match string) float64 {
		v, _ := promSum(s, name, match)
		return v
	}
	t := relayTimings{ok: true}
	t.claimSum, t.claimN = get("outbox_claim_duration_seconds_sum", ""), get("outbox_claim_duration_seconds_count", "")
	t.claimRowsSum, t.claimRowsN = get("outbox_claim_duration_seconds_sum", `result="rows"`), get("outbox_claim_duration_seconds_count", `result="rows"`)
	t.batchSum, t.batchN = get("outbox_claim_batch_size_sum", ""), get("outbox_claim_batch_size_count", "")
	t.markSum, t.markN = get("outbox_mark_duration_seconds_sum", ""), get("outbox_mark_duration_seconds_count", "")
	t.produceSum, t.produceN = get("outbox_kafka_produce_duration_seconds_sum", ""), get("outbox_kafka_produce_duration_seconds_count", "")
	t.produceUnder5ms = get("outbox_kafka_produce_duration_seconds_bucket", `le="0.005"`)
	t.publishLatSum, t.publishLatN = get("outbox_publish_latency_seconds_sum", ""), get("outbox_publish_latency_seconds_count", "")
	return t
}

// since returns what happened between the scrape a and t (a later one),
// nil when either scrape failed.
func (t relayTimings) since(a relayTimings) *RelayTimings {
	if !t.ok || !a.ok {
		return nil
	}
	mean := func(sum, n float64) float64 {
		if n <= 0 {
			return 0
		}
		return sum / n
	}
	r := &RelayTimings{
		Claims:               int64(t.claimN - a.claimN),
		ClaimMeanMS:          1000 * mean(t.claimSum-a.claimSum, t.claimN-a.claimN),
		ClaimsWithRows:       int64(t.claimRowsN - a.claimRowsN),
		ClaimRowsMeanMS:      1000 * mean(t.claimRowsSum-a.claimRowsSum, t.claimRowsN-a.claimRowsN),
		EventsPerClaim:       mean(t.batchSum-a.batchSum, t.batchN-a.batchN),
		Marks:                int64(t.markN - a.markN),
		MarkMeanMS:           1000 * mean(t.markSum-a.markSum, t.markN-a.markN),
		Produces:             int64(t.produceN - a.produceN),
		ProduceMeanMS:        1000 * mean(t.produceSum-a.produceSum, t.produceN-a.produceN),
		PublishLatencyMeanMS: 1000 * mean(t.publishLatSum-a.publishLatSum, t.publishLatN-a.publishLatN),
	}
	if n := t.produceN - a.produceN; n > 0 {
		r.ProduceOver5MS = 1 - (t.produceUnder5ms-a.produceUnder5ms)/n
	}
	return r
}
