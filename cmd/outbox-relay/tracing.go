package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.uber.org/zap"
)

// tracingEnv are the environment variables that turn the relay's spans on
// (tracingWanted); the others the SDK reads are listed in the operating
// docs.
var tracingEnv = []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// tracingWanted reports whether the environment (getenv) asks for traces.
// The OpenTelemetry specification makes "otlp" the default of
// OTEL_TRACES_EXPORTER, so a process that honoured it blindly would send
// spans to localhost:4318 wherever it runs; the relay's spans are opt-in
// instead: on when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or when it is unset and an OTLP endpoint is
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); off
// with OTEL_SDK_DISABLED=true.
func tracingWanted(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" {
		return e != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracingShutdownTimeout bounds the export of the spans still queued when
// the relay stops.
const tracingShutdownTimeout = 5 * time.Second

// tracerFromEnv returns the tracer provider of `outbox-relay run`, built
// from the standard OpenTelemetry environment variables by the SDK and its
// autoexport package (exporter, protocol, endpoint, headers, sampler,
// batching, resource), or nil when tracingWanted says no. Spans go through
// the SDK's batching span processor, so a slow or absent collector delays
// no publish (spans beyond its queue are dropped). service.name defaults
// to outbox-relay, service.version to the relay's version; OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES override them. Export errors are logged as
// warnings on log (the SDK's global error handler). An invalid value
// (OTEL_TRACES_EXPORTER=zipkin, a bad protocol) is an error naming it.
func tracerFromEnv(ctx context.Context, log *zap.Logger) (*sdktrace.TracerProvider, error) {
	if !tracingWanted(os.Getenv) {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("outbox-relay"), semconv.ServiceVersion(relayVersion())),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	tlog := log.Named("tracing")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		tlog.Warn("exporting spans failed; the relay goes on, the spans are lost", zap.Error(err))
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	var set []string
	for _, k := range append(tracingEnv, "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME") {
		if v := os.Getenv(k); v != "" {
			set = append(set, k+"="+v)
		}
	}
	tlog.Info("tracing on: spans of each event's time in the outbox and of its publish", zap.Strings("env", set))
	return tp, nil
}

// shutdownTracing exports what is queued, within tracingShutdownTimeout.
func shutdownTracing(tp *sdktrace.TracerProvider, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Named("tracing").Warn("exporting the last spans failed", zap.Error(err))
	}
}
