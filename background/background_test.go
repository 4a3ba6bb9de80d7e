package background

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRing(t *testing.T) {
	r := ring{keep: 8}
	r.write([]byte("abc"))
	if b, d := r.snapshot(); string(b) != "abc" || d != 0 {
		t.Fatalf("%q %d", b, d)
	}
	r.write([]byte("defghij")) // 10 bytes: the first 2 go
	if b, d := r.snapshot(); string(b) != "cdefghij" || d != 2 {
		t.Fatalf("%q %d", b, d)
	}
	r.write([]byte("kl"))
	if b, d := r.snapshot(); string(b) != "efghijkl" || d != 4 {
		t.Fatalf("%q %d", b, d)
	}
	r.write([]byte("0123456789")) // more than it keeps at once
	if b, d := r.snapshot(); string(b) != "23456789" || d != 14 {
		t.Fatalf("%q %d", b, d)
	}
	for i := 0; i < 100; i++ {
		r.write([]byte{byte('a' + i%26)})
	}
	var want bytes.Buffer
	for i := 92; i < 100; i++ {
		want.WriteByte(byte('a' + i%26))
	}
	if b, d := r.snapshot(); string(b) != want.String() || d != 114 {
		t.Fatalf("%q %d, want %q 114", b, d, want.String())
	}
}

// fake runs a "command" that writes to its streams and waits for a signal
// or its context.
func fake(lines int, ignoreTerm bool) Run {
	return func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (Outcome, error) {
		for i := 0; i < lines; i++ {
			fmt.Fprintf(stdout, "line %d\n", i)
		}
		fmt.Fprintln(stderr, "ready")
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM && ignoreTerm {
					continue
				}
				return Outcome{ExitCode: 128 + int(s.(syscall.Signal))}, nil
			case <-ctx.Done():
				return Outcome{ExitCode: 125, Messages: []string{"hutch: cancelled"}}, nil
			}
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartListOutputStop(t *testing.T) {
	tab := &Table{Keep: 64}
	c, err := tab.Start([]string{"server", "--port", "8080"}, fake(100, false))
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "1" || !c.Running() {
		t.Fatalf("started: %+v", c.Info())
	}
	waitFor(t, func() bool { return bytes.Contains(c.Output().Stderr, []byte("ready")) })
	o := c.Output()
	if !bytes.HasSuffix(o.Stdout, []byte("line 99\n")) || len(o.Stdout) != 64 || o.StdoutDropped == 0 {
		t.Errorf("output while running: %q, %d dropped", o.Stdout, o.StdoutDropped)
	}
	if l := tab.List(); len(l) != 1 || !l[0].Running || l[0].Argv[2] != "8080" {
		t.Errorf("list: %+v", l)
	}
	c.Stop(time.Second)
	in := c.Info()
	if in.Running || in.ExitCode != 143 || !in.Stopped || in.Ended.IsZero() {
		t.Errorf("stopped: %+v", in)
	}
	if got, err := tab.Get("1"); err != nil || got != c {
		t.Errorf("Get: %v", err)
	}
	if _, err := tab.Get("7"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Get of an unknown id: %v", err)
	}
	if tab.Running() != 0 {
		t.Error("still counted as running")
	}
}

// A command that ignores SIGTERM gets SIGKILL after the grace.
func TestStopEscalates(t *testing.T) {
	tab := &Table{}
	c, _ := tab.Start([]string{"stubborn"}, fake(0, true))
	t0 := time.Now()
	c.Stop(100 * time.Millisecond)
	if in := c.Info(); in.ExitCode != 137 || time.Since(t0) < 100*time.Millisecond {
		t.Errorf("after %s: %+v", time.Since(t0), in)
	}
}

// Close waits for the running commands to end (their owner ends them)
// and refuses new ones.
func TestCloseWaits(t *testing.T) {
	tab := &Table{}
	slow := func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (Outcome, error) {
		time.Sleep(100 * time.Millisecond)
		return Outcome{}, nil
	}
	a, _ := tab.Start([]string{"a"}, slow)
	b, _ := tab.Start([]string{"b"}, slow)
	tab.Close()
	if a.Running() || b.Running() {
		t.Error("Close returned with a command running")
	}
	if _, err := tab.Start([]string{"c"}, fake(0, false)); err == nil {
		t.Error("started after Close")
	}
}

func TestBounds(t *testing.T) {
	tab := &Table{}
	quick := func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (Outcome, error) {
		return Outcome{}, errors.New("could not start")
	}
	for i := 0; i < MaxEnded+5; i++ {
		c, err := tab.Start([]string{"q"}, quick)
		if err != nil {
			t.Fatal(err)
		}
		<-c.Done()
	}
	if l := tab.List(); len(l) > MaxEnded+1 {
		t.Errorf("%d ended commands kept, at most %d", len(l), MaxEnded+1)
	} else if in := l[len(l)-1]; in.ExitCode != 125 || !strings.Contains(strings.Join(in.Messages, " "), "could not start") {
		t.Errorf("a command that could not start: %+v", in)
	}
	for i := 0; i < MaxRunning; i++ {
		if _, err := tab.Start([]string{"s"}, fake(0, false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tab.Start([]string{"one too many"}, fake(0, false)); err == nil || !strings.Contains(err.Error(), "stop one first") {
		t.Errorf("beyond MaxRunning: %v", err)
	}
	for _, in := range tab.List() {
		c, _ := tab.Get(in.ID)
		c.Stop(time.Second)
	}
	tab.Close()
}
