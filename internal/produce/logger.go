package produce

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// retryLogInterval is the least time between two Warn lines of kafka-go's
// error log (Writer.ErrorLogger: one line per failed produce attempt, per
// partition batch). Under a failing broker that is one line per batch per
// attempt; the Publisher logs the first line at Warn, then at most one Warn
// line per retryLogInterval carrying "suppressed", the number of lines
// logged at Debug only since the previous Warn line. The failures
// themselves are also returned by Publish, and the relay logs those.
const retryLogInterval = 10 * time.Second

// retryLogger is kafka-go's Writer.ErrorLogger, rate-limited as described
// at retryLogInterval: kafka-go logs every failed attempt of every batch
// (writer.go partitionWriter.writeBatch; no kafka-go issue).
type retryLogger struct {
	log      *zap.Logger
	prefix   string // of every line: "kafka-go: " for the Writer's
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	next       time.Time // no Warn line before
	suppressed int
}

func newRetryLogger(log *zap.Logger) *retryLogger {
	return &retryLogger{log: log, prefix: "kafka-go: ", interval: retryLogInterval, now: time.Now}
}

// Printf implements kafka-go's Logger.
func (l *retryLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if now.Before(l.next) {
		l.suppressed++
		l.mu.Unlock()
		if l.log.Core().Enabled(zap.DebugLevel) {
			l.log.Debug(l.prefix+fmt.Sprintf(format, args...), zap.Bool("rate_limited", true))
		}
		return
	}
	n := l.suppressed
	l.suppressed = 0
	l.next = now.Add(l.interval)
	l.mu.Unlock()
	l.log.Warn(l.prefix+fmt.Sprintf(format, args...), zap.Int("suppressed", n),
		zap.Duration("next_warn_after", l.interval))
}
