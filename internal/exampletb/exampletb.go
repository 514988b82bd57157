// Package exampletb gives a godoc Example the testing.TB that the module's
// test helpers take (internal/testenv, outboxtest): an Example has none,
// and testing.TB cannot be implemented outside package testing except by
// embedding it.
//
// A failure (Fatal, Fatalf, Error, Errorf, FailNow) panics with its
// message, which fails the Example; logs go to stderr, which an Example's
// Output does not compare. Calling a method not defined here panics too
// (the embedded TB is nil), so a helper that starts using one fails
// loudly rather than silently.
package exampletb

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// TB is the testing.TB of one Example. Call Done when the Example ends:
// it runs the cleanups the helpers registered, last first.
type TB struct {
	testing.TB // nil: only the methods below may be called

	name     string
	mu       sync.Mutex
	cleanups []func()
}

// New returns the TB of the Example named name (its Name, from which
// helpers may derive schema or topic names).
func New(name string) *TB { return &TB{name: name} }

// Done runs the registered cleanups, last registered first.
func (tb *TB) Done() {
	tb.mu.Lock()
	c := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// Cleanup registers f for Done.
func (tb *TB) Cleanup(f func()) {
	tb.mu.Lock()
	tb.cleanups = append(tb.cleanups, f)
	tb.mu.Unlock()
}

// Context returns context.Background(): an Example has no deadline.
func (tb *TB) Context() context.Context { return context.Background() }

// Helper does nothing.
func (tb *TB) Helper() {}

// Name returns the Example's name.
func (tb *TB) Name() string { return tb.name }

// Log writes args to stderr.
func (tb *TB) Log(args ...any) { fmt.Fprintln(os.Stderr, append([]any{tb.name + ":"}, args...)...) }

// Logf writes a formatted line to stderr.
func (tb *TB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, tb.name+": "+format+"\n", args...)
}

// Error panics with args.
func (tb *TB) Error(args ...any) { panic(tb.name + ": " + fmt.Sprint(args...)) }

// Errorf panics with the formatted message.
func (tb *TB) Errorf(format string, args ...any) {
	panic(tb.name + ": " + fmt.Sprintf(format, args...))
}

// Fatal panics with args.
func (tb *TB) Fatal(args ...any) { tb.Error(args...) }

// Fatalf panics with the formatted message.
func (tb *TB) Fatalf(format string, args ...any) { tb.Errorf(format, args...) }

// FailNow panics.
func (tb *TB) FailNow() { panic(tb.name + ": FailNow") }

// Failed reports false: a failure has already panicked.
func (tb *TB) Failed() bool { return false }
