package outbox

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkValidateEvent measures the writer's validation of one event,
// what outbox.Add does before it sends anything, on the caller's hot path:
// a typical small event, a 4 KB payload of plain text, and one whose
// strings carry \u escapes.
func BenchmarkValidateEvent(b *testing.B) {
	w, err := NewWriter(WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	small := Event{ID: NewID(), AggregateID: "order-1234567", Type: "order.paid",
		Payload: json.RawMessage(`{"amount":"12.50","currency":"EUR","customer":"c-981","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}`),
		Headers: map[string]string{"tenant": "acme", "source": "checkout"}}
	large := small
	large.Payload = json.RawMessage(`{"text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 150) + `","n":[1,2,3,4,5,6,7,8,9,10]}`)
	escaped := small
	escaped.Payload = json.RawMessage(`{"name":"Ren\u00e9e \u20ac \ud83d\ude00","path":"C:\\dir\\file","quote":"\"x\""}`)
	for _, c := range []struct {
		name string
		ev   Event
	}{{"small", small}, {"4KB", large}, {"escapes", escaped}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.ev.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				if err := w.validateEvent(0, &c.ev, c.ev.Headers); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPostgresChecks measures what the NUL, UTF-8 and \u escape
// checks (textProblem, jsonbProblem) add to BenchmarkValidateEvent's
// events.
func BenchmarkPostgresChecks(b *testing.B) {
	for _, c := range []struct{ name, agg, payload string }{
		{"small", "order-1234567", `{"amount":"12.50","currency":"EUR","customer":"c-981","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}`},
		{"4KB", "order-1234567", `{"text":"` + strings.Repeat("lorem ipsum dolor sit amet ", 150) + `","n":[1,2,3,4,5,6,7,8,9,10]}`},
		{"escapes", "order-1234567", `{"name":"Ren\u00e9e \u20ac \ud83d\ude00","path":"C:\\dir\\file","quote":"\"x\""}`},
	} {
		payload := []byte(c.payload)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if textProblem(c.agg) != "" || textProblem("order.paid") != "" || jsonbProblem(payload) != "" {
					b.Fatal("refused")
				}
			}
		})
	}
}
