//go:build !mcpimage

package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// laterLog holds log records back until the answer they belong to is out:
// the MCP server logs every run_command call, and formatting that line and
// writing it to stderr took ~40-50 us of the call's path here. Records are
// written by one goroutine, in the order they were made, through the
// handler each came from, once Release says the answers written so far
// are out, or laterLogWait after they were made when no answer follows
// (start-up, shutdown).
type laterLog struct {
	mu       sync.Mutex
	queue    []laterRecord
	seq      uint64 // records made so far
	released uint64 // records that may be written
	closed   bool
	wait     time.Duration // laterLogWait, or a test's
	wake     chan struct{}
	done     chan struct{}
}

type laterRecord struct {
	h   slog.Handler
	r   slog.Record
	seq uint64
	at  time.Time
}

const (
	// laterLogWait bounds how long a record waits for a Release.
	laterLogWait = 5 * time.Millisecond
	// laterLogMax bounds the records held back: more release them all.
	laterLogMax = 256
)

// newLaterLog starts the writer goroutine, which writes a record at the
// latest wait after it was made; Close stops it after writing every record.
func newLaterLog(wait time.Duration) *laterLog {
	l := &laterLog{wait: wait, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go l.write()
	return l
}

// Handler wraps h: its records go through l.
func (l *laterLog) Handler(h slog.Handler) slog.Handler { return &laterHandler{l: l, next: h} }

// Release lets every record made so far be written.
func (l *laterLog) Release() {
	l.mu.Lock()
	l.released = l.seq
	l.mu.Unlock()
	l.notify()
}

// Close writes every record and stops the writer; later records are
// written at once.
func (l *laterLog) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.notify()
	<-l.done
}

func (l *laterLog) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// add queues a record; first says the queue was empty (the writer then
// has no deadline to keep yet).
func (l *laterLog) add(h slog.Handler, r slog.Record) (queued, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false, false
	}
	l.seq++
	first = len(l.queue) == 0
	l.queue = append(l.queue, laterRecord{h: h, r: r.Clone(), seq: l.seq, at: time.Now()})
	if len(l.queue) > laterLogMax {
		l.released = l.seq
		first = true
	}
	return true, first
}

// write is the writer goroutine.
func (l *laterLog) write() {
	defer close(l.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		l.mu.Lock()
		n := 0
		for n < len(l.queue) && (l.closed || l.queue[n].seq <= l.released) {
			n++
		}
		out := l.queue[:n:n]
		l.queue = l.queue[n:]
		if len(l.queue) == 0 {
			l.queue = nil
		}
		var oldest time.Time
		if len(l.queue) > 0 {
			oldest = l.queue[0].at
		}
		closed := l.closed
		l.mu.Unlock()
		for _, q := range out {
			_ = q.h.Handle(context.Background(), q.r)
		}
		if closed && oldest.IsZero() {
			return
		}
		if !oldest.IsZero() {
			timer.Reset(time.Until(oldest.Add(l.wait)))
		}
		select {
		case <-l.wake:
		case <-timer.C:
			l.Release()
		}
		timer.Stop()
	}
}

type laterHandler struct {
	l    *laterLog
	next slog.Handler
}

func (h *laterHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *laterHandler) Handle(ctx context.Context, r slog.Record) error {
	if queued, first := h.l.add(h.next, r); queued {
		if first {
			h.l.notify()
		}
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *laterHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &laterHandler{l: h.l, next: h.next.WithAttrs(attrs)}
}

func (h *laterHandler) WithGroup(name string) slog.Handler {
	return &laterHandler{l: h.l, next: h.next.WithGroup(name)}
}
