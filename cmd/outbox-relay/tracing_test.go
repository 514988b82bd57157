package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestTracingIsOptIn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "relay", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, false},
	}
	for _, c := range cases {
		if got := tracingWanted(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("environment %v: tracing %v, want %v", c.env, got, c.want)
		}
	}
}

// collector is an OTLP/HTTP trace receiver keeping the spans it is sent,
// with their resource's service.name.
type collector struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				c.service = append(c.service, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) names(traceID []byte) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.spans {
		if bytes.Equal(s.TraceId, traceID) {
			out = append(out, s.Name)
		}
	}
	return out
}

// outbox-relay run with OTEL_EXPORTER_OTLP_ENDPOINT sends the spans of an
// event written under a span, in the writer's trace, to that endpoint
// over OTLP/HTTP (autoexport's default protocol), as service outbox-relay.
func TestRunExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildRelay(t)
	db := testenv.MigratedDB(t)
	k := testenv.Kafka(t)
	topic := k.Topic(t, 1)
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()

	cmd := exec.Command(bin, "run", "--brokers", strings.Join(k.Brokers, ","), "--topic", topic, "--metrics-addr", "")
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+db.ConnString, "OUTBOX_LOG_FORMAT=console",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()
	app, span := tp.Tracer("app").Start(ctx, "capture payment")
	if err := outbox.Add(app, db.Pool, outbox.Event{AggregateID: "pay_1", Type: "payment.captured", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	span.End()
	traceID := span.SpanContext().TraceID()
	want := []string{"outbox " + topic, "send " + topic}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got := col.names(traceID[:])
		return len(got) == 2 && slices.Contains(got, want[0]) && slices.Contains(got, want[1])
	}, "the collector did not get the spans %v of trace %s\n%s", want, traceID, &stderr)
	col.mu.Lock()
	service := col.service
	col.mu.Unlock()
	if len(service) == 0 || service[0] != "outbox-relay" {
		t.Errorf("service.name %v, want outbox-relay", service)
	}
	if !strings.Contains(stderr.String(), "tracing on") {
		t.Errorf("no 'tracing on' line in the log:\n%s", &stderr)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, &stderr)
	}
}
