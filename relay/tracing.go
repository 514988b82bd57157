package relay

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/pgoutbox/outbox/relay"

// Attributes of the relay's spans besides the semantic conventions'
// messaging.* and error.type.
const (
	// attrOutcome is the Attempt's Outcome: "published", "retried" or
	// "dead_lettered".
	attrOutcome = attribute.Key("outbox.outcome")
	// attrAttempts is Attempt.Attempts: failed attempts that count toward
	// the maximum, this one included.
	attrAttempts = attribute.Key("outbox.attempts")
	// attrEventType is the event's type (the event_type header).
	attrEventType = attribute.Key("outbox.event_type")
)

// NewTracingObserver returns an AttemptObserver that records OpenTelemetry
// spans with tp's tracer (tracerName), two per event that leaves the
// outbox:
//
//   - "outbox <topic>" (kind internal), the event's time in the outbox:
//     from its created_at (the writing transaction's start, by the
//     database's clock) to the start of the publish call that published
//     or dead-lettered it, retries included;
//   - "send <topic>" (kind producer), that publish call; a failed attempt
//     that is retried gets one too.
//
// Both are children of the writer's span when the row carries its trace
// context (the traceparent and tracestate headers outbox.Add stores from
// its ctx). Without it, the outbox span is the root of a trace of its own
// and the send span its child; a retried attempt's send span is then a
// root. Their attributes:
// messaging.system "kafka", messaging.operation.name and .type "send"
// (the send span), messaging.destination.name (the topic),
// messaging.destination.partition.id (when known, see Attempt.Partition),
// messaging.message.id (the event ID), messaging.kafka.message.key (the
// aggregate ID), outbox.event_type, outbox.outcome and outbox.attempts. A
// failed attempt's send span, and a dead letter's outbox span, also have
// error.type (Attempt.Reason: a small fixed set) and status Error with
// the error's text.
//
// The spans are recorded after the fact, with their own timestamps, from
// the publisher goroutine: the publish waits on no exporter (use a batching
// span processor, as the SDK's environment configuration does). A span the
// sampler drops costs its Start and nothing more. A nil tp returns nil
// (Observers skips it). ServiceConfig.TracerProvider wires it into a
// Service; with New, pass Observers(yours, NewTracingObserver(tp)) as
// Config.Observer.
func NewTracingObserver(tp trace.TracerProvider) AttemptObserver {
	if tp == nil {
		return nil
	}
	return &tracingObserver{tracer: tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL))}
}

type tracingObserver struct {
	ObserverFuncs
	tracer trace.Tracer
}

// Attempted implements AttemptObserver.
func (o *tracingObserver) Attempted(a Attempt) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(a.Row.Headers))
	common := func(span trace.Span) {
		span.SetAttributes(
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(a.Topic),
			semconv.MessagingMessageID(a.Row.ID),
			semconv.MessagingKafkaMessageKey(a.Row.AggregateID),
			attrEventType.String(a.Row.EventType),
			attrOutcome.String(string(a.Outcome)),
			attrAttempts.Int(a.Attempts),
		)
		if a.Partition >= 0 {
			span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(a.Partition)))
		}
	}
	failed := func(span trace.Span) {
		span.SetAttributes(semconv.ErrorTypeKey.String(a.Reason))
		span.SetStatus(codes.Error, a.Err.Error())
	}
	if a.Outcome != OutcomeRetried && !a.Row.CreatedAt.IsZero() {
		// Clocks differ: a created_at after the publish began (by this
		// host's clock) is an empty wait, not a negative one.
		start := a.Row.CreatedAt
		if start.After(a.Began) {
			start = a.Began
		}
		wctx, span := o.tracer.Start(ctx, "outbox "+a.Topic, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = wctx // no writer's trace: the send span joins this one
		}
		if span.IsRecording() {
			common(span)
			if a.Err != nil {
				failed(span)
			}
		}
		span.End(trace.WithTimestamp(a.Began))
	}
	_, span := o.tracer.Start(ctx, "send "+a.Topic, trace.WithTimestamp(a.Began), trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		common(span)
		span.SetAttributes(semconv.MessagingOperationName("send"), semconv.MessagingOperationTypeSend)
		if a.Err != nil {
			failed(span)
		}
	}
	span.End(trace.WithTimestamp(a.Ended))
}
