package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// freeAddr returns a loopback address with a free port, for a relay's
// metrics server.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// claimBuckets reads outbox_claim_duration_seconds_bucket{result="rows"}
// from a relay's /metrics: cumulative counts by upper bound (seconds).
func claimBuckets(addr string) (map[float64]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "outbox_claim_duration_seconds_bucket{") || !strings.Contains(line, `result="rows"`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.Index(line[i+4:], `"`)
		le := line[i+4 : i+4+j]
		bound := math.Inf(1)
		if le != "+Inf" {
			if bound, err = strconv.ParseFloat(le, 64); err != nil {
				continue
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[bound] += v
	}
	return out, sc.Err()
}

// quantile returns the q-quantile (upper bound of its bucket, seconds) of
// the difference between two cumulative histograms.
func quantile(now, before map[float64]float64, q float64) (float64, float64) {
	bounds := make([]float64, 0, len(now))
	for b := range now {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := now[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0, 0
	}
	for _, b := range bounds {
		if now[b]-before[b] >= q*total {
			return b, total
		}
	}
	return math.Inf(1), total
}

// watchClaims logs, once a minute, the p99 of the relays' claims that
// found rows over that minute (from their own histograms), and returns the
// lines for the summary when ctx ends.
func (s *soak) watchClaims(ctx context.Context) []string {
	var lines []string
	before := map[string]map[float64]float64{}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for minute := 1; ; minute++ {
		select {
		case <-ctx.Done():
			return lines
		case <-t.C:
		}
		s.mu.Lock()
		relays := append([]*relayProc(nil), s.relays...)
		s.mu.Unlock()
		all, prev := map[float64]float64{}, map[float64]float64{}
		for _, p := range relays {
			if p == nil || p.metricsAddr == "" {
				continue
			}
			now, err := claimBuckets(p.metricsAddr)
			if err != nil {
				continue
			}
			for b, v := range now {
				all[b] += v
				prev[b] += before[p.name][b]
			}
			before[p.name] = now
		}
		p99, n := quantile(all, prev, 0.99)
		p50, _ := quantile(all, prev, 0.5)
		line := fmt.Sprintf("minute %2d: claims with rows %6.0f, p50 <= %s, p99 <= %s%s", minute, n, fmtBound(p50), fmtBound(p99), s.snapshotNote())
		logf("claims: %s", line)
		lines = append(lines, line)
	}
}

func fmtBound(b float64) string {
	if math.IsInf(b, 1) {
		return "inf"
	}
	return time.Duration(b * float64(time.Second)).String()
}

// holdSnapshot opens a REPEATABLE READ transaction on the soak's database
// and keeps it idle for d (or until ctx ends), as a forgotten session or a
// long report does: VACUUM cannot remove the outbox table's dead rows
// meanwhile.
func (s *soak) holdSnapshot(ctx context.Context, d time.Duration) {
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		logf("held snapshot: connect: %v", err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		logf("held snapshot: %v", err)
		return
	}
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM outbox"); err != nil {
		logf("held snapshot: %v", err)
		return
	}
	s.snapshotSince.Store(time.Now().UnixNano())
	defer s.snapshotSince.Store(0)
	logf("held snapshot: a REPEATABLE READ transaction stays open for %s", d)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	_, _ = conn.Exec(context.Background(), "ROLLBACK")
	logf("held snapshot: released")
}

func (s *soak) snapshotNote() string {
	if since := s.snapshotSince.Load(); since != 0 {
		return fmt.Sprintf(" (snapshot held for %s)", time.Since(time.Unix(0, since)).Round(time.Second))
	}
	return ""
}
