package bench

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Progress prints a progress line to W every Interval while a phase runs.
type Progress struct {
	// W receives the lines (usually os.Stderr). Required.
	W io.Writer
	// Interval between lines. Defaults to 2s.
	Interval time.Duration

	mu     sync.Mutex
	label  string
	start  time.Time
	status func() string
	stop   chan struct{}
	done   chan struct{}
}

// Begin starts reporting a phase called label; status returns its current
// figures. It ends the previous phase.
func (p *Progress) Begin(label string, status func() string) {
	if p == nil || p.W == nil {
		return
	}
	p.End()
	if p.Interval <= 0 {
		p.Interval = 2 * time.Second
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.start, p.status = label, time.Now(), status
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	fmt.Fprintf(p.W, "bench: %s ...\n", label)
	go p.loop(p.stop, p.done, label, p.start, status)
}

func (p *Progress) loop(stop, done chan struct{}, label string, start time.Time, status func() string) {
	defer close(done)
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(p.W, "bench: %s %5.1fs %s\n", label, time.Since(start).Seconds(), status())
		}
	}
}

// End stops reporting the current phase.
func (p *Progress) End() {
	if p == nil {
		return
	}
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
