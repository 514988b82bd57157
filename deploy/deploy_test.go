// Package deploy holds the deployment files (Helm chart, alert rules,
// Grafana dashboard, systemd unit); its tests run the tools that check
// them: promtool (Debian's prometheus package), helm (built from the Go
// module proxy by `make helm`) and systemd-analyze. A missing tool skips
// its test, except under CI (CI set), where .ci/run must have installed it.
// The metric names of the rules and the dashboard are checked against the
// relay's registry by bench/deploycheck (in the tooling module, which
// holds the PromQL parser).
package deploy

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// tool returns the path of a checking tool: $env if that file exists
// (the Makefile exports HELM, the cache path `make helm` builds into),
// else name on the PATH. Without it the test is skipped, or fails under
// CI unless OUTBOX_DEPLOY_CHECKS=later says that `make check-deploy` runs
// it afterwards (.ci/run builds helm while make test runs).
func tool(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" && os.Getenv("OUTBOX_DEPLOY_CHECKS") != "later" {
		t.Fatalf("%s not found (PATH or %s): CI must provide it (.ci/run)", name, env)
	}
	t.Skipf("%s not found (PATH or %s): skipped; `make check-deploy` provides it", name, env)
	return ""
}

// run runs a tool and returns its combined output, failing t when it
// exits non-zero.
func run(t *testing.T, dir, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The rules parse (promtool check rules) and their unit tests pass: each
// alert fires on its fault and is silent after the recovery.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := tool(t, "PROMTOOL", "promtool")
	t.Log(run(t, "prometheus", promtool, "check", "rules", "pgoutbox-rules.yaml"))
	t.Log(run(t, "prometheus", promtool, "test", "rules", "pgoutbox-rules.test.yaml"))
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []envVar `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe   *probe `yaml:"livenessProbe"`
	ReadinessProbe  *probe `yaml:"readinessProbe"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

func (c container) env(name string) *envVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// manifest is the part of a rendered object the checks read.
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas       int `yaml:"replicas"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		Template       struct {
			Spec struct {
				SecurityContext struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				InitContainers []container `yaml:"initContainers"`
				Containers     []container `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
		Groups []any `yaml:"groups"`
	} `yaml:"spec"`
	StringData map[string]string `yaml:"stringData"`
}

// render runs helm template with the values file and returns the
// objects by kind.
func render(t *testing.T, helm, values string) map[string]manifest {
	t.Helper()
	out := run(t, "helm", helm, "template", "r", "pgoutbox", "--values", values)
	byKind := map[string]manifest{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return byKind
		}
		if err != nil {
			t.Fatalf("helm template --values %s: %v\n%s", values, err, out)
		}
		if m.Kind == "" {
			continue
		}
		if _, dup := byKind[m.Kind]; dup {
			t.Fatalf("two %s objects rendered", m.Kind)
		}
		byKind[m.Kind] = m
	}
}

// relay returns the Deployment's relay container, after checking what
// every configuration must have: probes on the metrics port, resources,
// the security context, DATABASE_URL from a Secret, brokers and topic.
func relay(t *testing.T, objs map[string]manifest, wantSecret, wantKey string) container {
	t.Helper()
	d, ok := objs["Deployment"]
	if !ok {
		t.Fatalf("no Deployment rendered: %v", slices.Collect(maps.Keys(objs)))
	}
	ps := d.Spec.Template.Spec
	if !ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v, want runAsNonRoot and user 65532", ps.SecurityContext)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers, want the relay", len(ps.Containers))
	}
	c := ps.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("args %q, want run first", c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9090 {
		t.Errorf("ports %+v, want metrics 9090", c.Ports)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port != "metrics" {
		t.Errorf("livenessProbe %+v, want GET /healthz on metrics", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port != "metrics" {
		t.Errorf("readinessProbe %+v, want GET /readyz on metrics", c.ReadinessProbe)
	}
	for _, cc := range append([]container{c}, ps.InitContainers...) {
		sc := cc.SecurityContext
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("%s securityContext %+v, want no privilege escalation, a read-only root and ALL capabilities dropped", cc.Name, sc)
		}
		if cc.Resources.Requests["cpu"] == "" || cc.Resources.Requests["memory"] == "" || cc.Resources.Limits["memory"] == "" {
			t.Errorf("%s resources %+v, want cpu and memory requests and a memory limit", cc.Name, cc.Resources)
		}
		db := cc.env("DATABASE_URL")
		if db == nil || db.ValueFrom == nil || db.ValueFrom.SecretKeyRef == nil || db.ValueFrom.SecretKeyRef.Name != wantSecret || db.ValueFrom.SecretKeyRef.Key != wantKey {
			t.Errorf("%s DATABASE_URL %+v, want the Secret %s key %s", cc.Name, db, wantSecret, wantKey)
		}
	}
	if pdb, ok := objs["PodDisruptionBudget"]; !ok || pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1", pdb)
	}
	return c
}

// The chart lints, and renders what its values say: the chart's own
// Secret (two replicas by default, the migrate init container), and
// existing Secrets with SASL, TLS and the monitoring objects. The
// PrometheusRule carries the rules file that promtool tests.
func TestHelmChart(t *testing.T) {
	helm := tool(t, "HELM", "helm")
	for _, v := range []string{"pgoutbox/ci/managed-secret-values.yaml", "pgoutbox/ci/existing-secret-values.yaml"} {
		run(t, "helm", helm, "lint", "--strict", "pgoutbox", "--values", v)
	}

	own := render(t, helm, "pgoutbox/ci/managed-secret-values.yaml")
	if d := own["Deployment"]; d.Spec.Replicas != 2 {
		t.Errorf("replicas %d by default, want 2", d.Spec.Replicas)
	}
	c := relay(t, own, "r-pgoutbox", "DATABASE_URL")
	for _, a := range []string{"--brokers=kafka-0.kafka:9092,kafka-1.kafka:9092", "--topic=payments", "--table=outbox", "--metrics-addr=:9090"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %q lack %s", c.Args, a)
		}
	}
	if id := c.env("OUTBOX_RELAY_ID"); id == nil || id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("OUTBOX_RELAY_ID %+v, want the pod's name", id)
	}
	if init := own["Deployment"].Spec.Template.Spec.InitContainers; len(init) != 1 || !slices.Equal(init[0].Args[:1], []string{"migrate"}) {
		t.Errorf("initContainers %+v, want outbox-relay migrate", init)
	}
	if s := own["Secret"]; s.StringData["DATABASE_URL"] != "postgres://relay:secret@db:5432/app" || len(s.StringData) != 1 {
		t.Errorf("Secret %+v, want DATABASE_URL only", s.StringData)
	}
	for _, k := range []string{"ServiceMonitor", "PrometheusRule"} {
		if _, ok := own[k]; ok {
			t.Errorf("%s rendered although not enabled", k)
		}
	}

	ext := render(t, helm, "pgoutbox/ci/existing-secret-values.yaml")
	c = relay(t, ext, "app-db", "url")
	if ext["Deployment"].Spec.Replicas != 3 || len(ext["Deployment"].Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("replicas %d, init containers %d; want 3 and none (migrate.enabled false)", ext["Deployment"].Spec.Replicas, len(ext["Deployment"].Spec.Template.Spec.InitContainers))
	}
	if _, ok := ext["Secret"]; ok {
		t.Errorf("the chart's Secret rendered although every secret is an existing one")
	}
	pw := c.env("OUTBOX_KAFKA_SASL_PASSWORD")
	if pw == nil || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "kafka-relay" || pw.ValueFrom.SecretKeyRef.Key != "password" {
		t.Errorf("OUTBOX_KAFKA_SASL_PASSWORD %+v, want the Secret kafka-relay key password", pw)
	}
	for name, want := range map[string]string{"OUTBOX_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "OUTBOX_KAFKA_SASL_USERNAME": "relay", "OUTBOX_KAFKA_TLS": "true", "OUTBOX_LOG_LEVEL": "debug"} {
		if e := c.env(name); e == nil || e.Value != want {
			t.Errorf("%s %+v, want %q", name, e, want)
		}
	}
	if !slices.Contains(c.Args, "--claim-window-poll=3ms") || !slices.Contains(c.Args, "--table=billing.outbox") || c.Image != "registry.example.com/outbox-relay:v0.1.0" {
		t.Errorf("args %q, image %s", c.Args, c.Image)
	}
	if sm, ok := ext["ServiceMonitor"]; !ok || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor %+v, want /metrics on the metrics port", sm.Spec.Endpoints)
	}
	rules, err := os.ReadFile("prometheus/pgoutbox-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &want); err != nil {
		t.Fatal(err)
	}
	if pr, ok := ext["PrometheusRule"]; !ok || len(want.Groups) == 0 || !reflect.DeepEqual(pr.Spec.Groups, want.Groups) {
		t.Errorf("PrometheusRule groups differ from deploy/prometheus/pgoutbox-rules.yaml's")
	}

	// A configuration the relay would refuse is refused by helm, named.
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "relay.brokers: required"},
		{[]string{"relay.brokers={kafka:9092}"}, "relay.topic: required"},
		{[]string{"relay.brokers={kafka:9092}", "relay.topic=t"}, "database: set database.existingSecret"},
		{[]string{"relay.brokers={kafka:9092}", "relay.topic=t", "database.existingSecret=db", "kafka.sasl.mechanism=SCRAM-SHA-1"}, `kafka.sasl.mechanism: "SCRAM-SHA-1" is not`},
		{[]string{"relay.brokers={kafka:9092}", "relay.topic=t", "database.existingSecret=db", "kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u"}, "kafka.sasl: set kafka.sasl.existingSecret or kafka.sasl.password"},
	} {
		args := []string{"template", "r", "pgoutbox"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		cmd := exec.Command(helm, args...)
		cmd.Dir = "helm"
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("helm template --set %q: %v, stderr %q; want a failure naming %q", tc.set, err, stderr.String(), tc.want)
		}
	}
}

// The systemd unit passes systemd-analyze verify without a word, and its
// hardening scores an exposure of at most 2.0 (systemd-analyze security
// --offline). The ExecStart binary must exist for verify: a stand-in
// takes /usr/local/bin/outbox-relay's place.
func TestSystemdUnit(t *testing.T) {
	sa := tool(t, "SYSTEMD_ANALYZE", "systemd-analyze")
	unit, err := os.ReadFile("systemd/outbox-relay.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("EnvironmentFile=/etc/outbox-relay/outbox-relay.env")) {
		t.Errorf("the unit has no EnvironmentFile=/etc/outbox-relay/outbox-relay.env")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "outbox-relay")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "outbox-relay.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/outbox-relay"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, dir, sa, "verify", path); out != "" {
		t.Errorf("systemd-analyze verify says:\n%s", out)
	}
	out := run(t, dir, sa, "security", "--offline=yes", "--threshold=20", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Log(lines[len(lines)-1])
}
