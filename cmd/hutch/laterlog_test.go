//go:build !mcpimage

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Records wait for Release, come out in order through their own handler,
// and Close writes what is left.
func TestLaterLog(t *testing.T) {
	var out syncBuffer
	l := newLaterLog(time.Hour)
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	info := slog.New(l.Handler(slog.NewTextHandler(&out, opts)))
	warn := slog.New(l.Handler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: opts.ReplaceAttr})))

	// A record made during a call waits for the call's answer.
	info.Info("one", "n", 1)
	warn.With("call", 7).Warn("two")
	warn.Info("dropped by its handler's level")
	time.Sleep(10 * time.Millisecond)
	if got := out.String(); got != "" {
		t.Fatalf("written before Release: %q", got)
	}
	l.Release()
	want := "level=INFO msg=one n=1\nlevel=WARN msg=two call=7\n"
	waitFor(t, "the released records", func() bool { return out.String() == want })

	info.Info("three")
	info.Info("four")
	l.Close()
	if got := out.String(); got != want+"level=INFO msg=three\nlevel=INFO msg=four\n" {
		t.Errorf("Close left records unwritten: %q", got)
	}
	info.Info("five") // after Close: at once
	if got := out.String(); !strings.HasSuffix(got, "msg=four\nlevel=INFO msg=five\n") {
		t.Errorf("after Close: %q", got)
	}
}

// With no answer to wait for, a record comes out after the wait.
func TestLaterLogWait(t *testing.T) {
	var out syncBuffer
	l := newLaterLog(20 * time.Millisecond)
	defer l.Close()
	lg := slog.New(l.Handler(slog.NewTextHandler(&out, nil)))
	start := time.Now()
	lg.Info("x")
	waitFor(t, "the unreleased record", func() bool { return strings.Contains(out.String(), "msg=x") })
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("an unreleased record was written after %s, before its wait", d)
	}
}

// More than laterLogMax records held back are released.
func TestLaterLogBounded(t *testing.T) {
	var out syncBuffer
	l := newLaterLog(time.Hour)
	defer l.Close()
	lg := slog.New(l.Handler(slog.NewTextHandler(&out, nil)))
	for i := 0; i <= laterLogMax; i++ {
		lg.Info("x")
	}
	waitFor(t, "the released records", func() bool { return strings.Count(out.String(), "msg=x") == laterLogMax+1 })
}
