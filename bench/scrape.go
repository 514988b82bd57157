package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("bench: free port: %w", err)
	}
	return addr, nil
}
