// Package deploycheck checks the deployment files (deploy/) against the
// metrics outbox-relay registers: every metric name and label that the
// alert rules and the dashboard use must exist.
package deploycheck_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/internal/retention"
)

// relayMetric is one metric outbox-relay run registers: its label names
// and whether it is a histogram (whose series are name_bucket, name_sum,
// name_count).
type relayMetric struct {
	labels    map[string]bool
	histogram bool
}

// descRE reads the name and variable labels of a prometheus.Desc from its
// String (the client has no accessor for them).
var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*, variableLabels: \{([^}]*)\}\}$`)

// relayMetrics returns every metric outbox-relay run registers: what
// metrics.New registers, plus what run adds (the listener state, the
// retention counters), from the registry's descriptors. Histograms are
// told by gathering after one observation of each kind through the
// relay.Observer methods the relay calls. Nothing connects to a database.
func relayMetrics(t *testing.T) map[string]relayMetric {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, err := metrics.New(metrics.Config{}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := claim.Row{Topic: "t", CreatedAt: time.Now()}
	m.Published([]claim.Row{row})
	m.Claimed(time.Millisecond, 1, 0, nil)
	m.Marked(time.Millisecond, 1, 1, nil)
	m.PublishFailed(row, "t", produce.ErrTLS, false)
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	histogram := map[string]bool{}
	for _, f := range families {
		histogram[f.GetName()] = f.GetType() == dto.MetricType_HISTOGRAM
	}
	// Describe only: the listener state needs a listener to be collected.
	m.Registry().MustRegister(metrics.ListenerState(nil))
	m.Registry().MustRegister(metrics.Retention(func() retention.Stats { return retention.Stats{} })...)
	ch := make(chan *prometheus.Desc)
	go func() {
		m.Registry().Describe(ch)
		close(ch)
	}()
	out := map[string]relayMetric{}
	for d := range ch {
		s := descRE.FindStringSubmatch(d.String())
		if s == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		labels := map[string]bool{}
		for _, l := range strings.Split(s[2], ",") {
			if l != "" {
				labels[l] = true
			}
		}
		out[s[1]] = relayMetric{labels: labels, histogram: histogram[s[1]]}
	}
	for _, want := range []string{"outbox_oldest_unpublished_age_seconds", "outbox_listener_state", "outbox_relay_stalled", "outbox_retention_errors_total", "outbox_claim_duration_seconds"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("the registry lacks %s: %d metrics read", want, len(out))
		}
	}
	if !out["outbox_claim_duration_seconds"].histogram || !out["outbox_claim_duration_seconds"].labels["result"] {
		t.Fatalf("outbox_claim_duration_seconds read as %+v, want a histogram labelled result", out["outbox_claim_duration_seconds"])
	}
	return out
}

// targetLabels are added by Prometheus or its Kubernetes service discovery,
// not by the relay.
var targetLabels = map[string]bool{"job": true, "instance": true, "pod": true, "namespace": true, "service": true, "container": true, "endpoint": true}

// checkExpr parses expr as PromQL and returns what is wrong with the
// metric names and label matchers it uses: every name must be one the
// relay registers (or a histogram's _bucket, _sum or _count), and every
// label it matches on must be the metric's own, le on a _bucket, or a
// target label.
func checkExpr(expr string, known map[string]relayMetric) []string {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var problems []string
	found := 0
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		found++
		name, suffix := vs.Name, ""
		m, ok := known[name]
		if !ok {
			for _, sfx := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(name, sfx); cut && known[base].histogram {
					name, suffix, m, ok = base, sfx, known[base], true
				}
			}
		}
		if !ok {
			problems = append(problems, "unknown metric "+vs.Name)
			return nil
		}
		for _, lm := range vs.LabelMatchers {
			switch {
			case lm.Name == "__name__", targetLabels[lm.Name], m.labels[lm.Name], lm.Name == "le" && suffix == "_bucket":
			default:
				problems = append(problems, vs.Name+" has no label "+lm.Name)
			}
		}
		return nil
	})
	if found == 0 {
		problems = append(problems, "selects no metric")
	}
	return problems
}

// grafanaVars are the dashboard's variables in range and duration
// positions, which PromQL cannot parse, and what stands in for them; the
// others ($job) sit in label values, which parse as they are.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// labelValuesRE is Grafana's label_values(<selector>, <label>) variable
// query.
var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// TestDashboardUsesTheRelaysMetrics parses every PromQL expression of the
// Grafana dashboard (panels and variables) and checks its metric names
// and labels against the relay's registry: a renamed metric or label
// fails here, not on a dashboard during an incident. It also checks that
// the panels on-call opens first are there.
func TestDashboardUsesTheRelaysMetrics(t *testing.T) {
	known := relayMetrics(t)
	b, err := os.ReadFile("../../deploy/grafana/pgoutbox.json")
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"` // in collapsed rows
	}
	var dash struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/pgoutbox.json: %v", err)
	}
	var titles []string
	exprs := map[string]string{} // expr -> where
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			titles = append(titles, p.Title)
			for _, tg := range p.Targets {
				exprs[tg.Expr] = "panel " + p.Title
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValuesRE.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %v is not label_values(<selector>, <label>)", v.Name, v.Query)
			continue
		}
		exprs[m[1]] = "variable " + v.Name
	}
	for expr, where := range exprs {
		if expr == "" {
			t.Errorf("%s: an empty expression", where)
			continue
		}
		for _, p := range checkExpr(grafanaVars.Replace(expr), known) {
			t.Errorf("%s: %s: %s", where, expr, p)
		}
	}
	for _, want := range []string{"Oldest unpublished age", "Publish rate by topic", "Publish errors by reason", "Relays stalled",
		"Claim duration", "Mark duration", "Listener state", "Dead letters"} {
		if !slices.Contains(titles, want) {
			t.Errorf("the dashboard has no panel %q (panels: %q)", want, titles)
		}
	}
}

// TestAlertRulesUseTheRelaysMetrics checks the metric names and labels of
// every rule in deploy/prometheus/pgoutbox-rules.yaml (promtool tests what
// they fire on), that the Helm chart ships the same file, and that the
// alerts the README documents are among them.
func TestAlertRulesUseTheRelaysMetrics(t *testing.T) {
	known := relayMetrics(t)
	b, err := os.ReadFile("../../deploy/prometheus/pgoutbox-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("pgoutbox-rules.yaml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, p := range checkExpr(r.Expr, known) {
				t.Errorf("rule %s%s: %s: %s", r.Alert, r.Record, r.Expr, p)
			}
		}
	}
	for _, want := range []string{"OutboxEventsStuck", "OutboxRelayStalled", "OutboxDeadLetters", "OutboxListenerDeaf", "OutboxRelayOnStandby", "OutboxSnapshotHeld"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
	chart, err := os.ReadFile("../../deploy/helm/pgoutbox/files/pgoutbox-rules.yaml")
	if err != nil {
		t.Fatalf("the Helm chart's rules: %v", err)
	}
	if string(chart) != string(b) {
		t.Errorf("deploy/helm/pgoutbox/files/pgoutbox-rules.yaml differs from deploy/prometheus/pgoutbox-rules.yaml")
	}
}

// A renamed metric or label, or an expression that does not parse, is
// caught by checkExpr.
func TestCheckExprCatchesRenames(t *testing.T) {
	known := relayMetrics(t)
	for expr, want := range map[string]string{
		`max(outbox_oldest_unpublished_age_secs)`:                                          "unknown metric outbox_oldest_unpublished_age_secs",
		`outbox_listener_state{status="deaf"}`:                                             "outbox_listener_state has no label status",
		`rate(outbox_published_events_total_bucket[5m])`:                                   "unknown metric outbox_published_events_total_bucket",
		`histogram_quantile(0.9, rate(outbox_mark_duration_seconds_bucket[5m]))`:           "",
		`sum by (le) (rate(outbox_claim_duration_seconds_bucket{result="rows"}[5m]` + `))`: "",
		`max(outbox_dead_letter_events{job="x", pod="p"})`:                                 "",
		`max(`: "does not parse",
	} {
		got := strings.Join(checkExpr(expr, known), "; ")
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("checkExpr(%s) = %q, want %q", expr, got, want)
		}
	}
}
