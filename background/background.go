// Package background keeps a session's detached commands: commands that
// outlive the call that started them (`hutch exec --detach`, run_command's
// "background"), such as a dev server. A Table holds each one's outcome
// and the last part of its output, readable while it runs, and stops one on
// request. It does not run anything itself: the caller's Run does (a
// session's Exec), and the command ends, as every command of a session
// does, when it exits, is stopped, or the session's sandbox ends.
package background

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/internal/outpipe"
)

// Bounds of a Table.
const (
	// DefaultKeep is how many bytes of each stream a command keeps: the
	// last ones.
	DefaultKeep = 1 << 20
	// MaxRunning is how many detached commands may run at once in one
	// session.
	MaxRunning = 32
	// MaxEnded is how many ended commands a table remembers (the oldest
	// are forgotten first).
	MaxEnded = 32
	// drainGrace bounds the reading of a command's output after it ended:
	// its streams end with its processes (the reaper kills them), so this
	// is a safety net.
	drainGrace = 2 * time.Second
)

// Outcome is how a command ended.
type Outcome struct {
	ExitCode int
	TimedOut bool
	// Messages are the "hutch: ..." lines of the command's end (a
	// timeout, a denial, a command that could not be executed).
	Messages []string
}

// Run runs one command with stdout and stderr as its output and sigs
// relayed to it, until it ends or ctx ends (then it is killed), and says
// how it ended; an error means it could not be run at all.
type Run func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (Outcome, error)

// Table is one session's detached commands. Its zero value is ready;
// Keep 0 means DefaultKeep.
type Table struct {
	Keep int

	mu     sync.Mutex
	next   int
	cmds   []*Command // in the order they started
	closed bool
	wg     sync.WaitGroup
}

// Command is one detached command.
type Command struct {
	ID      string
	Argv    []string
	Started time.Time

	stdout, stderr ring
	cancel         context.CancelFunc
	sigs           chan os.Signal
	done           chan struct{}

	mu      sync.Mutex
	ended   time.Time
	outcome Outcome
	err     error
	stopped bool
}

// Info describes a command for a listing.
type Info struct {
	ID      string    `json:"id"`
	Argv    []string  `json:"argv"`
	Started time.Time `json:"started"`
	Running bool      `json:"running"`
	// Ended, ExitCode and TimedOut are set once it ended.
	Ended    time.Time `json:"ended,omitzero"`
	ExitCode int       `json:"exit_code"`
	TimedOut bool      `json:"timed_out,omitempty"`
	// Stopped: it ended because it was stopped (Stop).
	Stopped bool `json:"stopped,omitempty"`
	// Messages are the "hutch: ..." lines of its end, or why it could
	// not be run.
	Messages []string `json:"messages,omitempty"`
}

// Output is what a command's streams kept: their last bytes, and how many
// came before them and were dropped.
type Output struct {
	Stdout, Stderr               []byte
	StdoutDropped, StderrDropped int64
}

// ErrUnknown is the error of Get for an id the table does not hold.
var ErrUnknown = errors.New("no such background command")

// Start runs run detached, as command argv: it returns at once, with the
// command's id, and the command runs until it ends, is stopped, or the
// table is closed.
func (t *Table) Start(argv []string, run Run) (*Command, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("the session is ending")
	}
	running := 0
	for _, c := range t.cmds {
		if c.Running() {
			running++
		}
	}
	if running >= MaxRunning {
		return nil, fmt.Errorf("%d background commands run in this session already, the most it runs at once: stop one first", running)
	}
	keep := t.Keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	outR, outW, err := outpipe.New()
	if err != nil {
		return nil, fmt.Errorf("the stdout pipe of a background command: %w", err)
	}
	errR, errW, err := outpipe.New()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("the stderr pipe of a background command: %w", err)
	}
	t.next++
	ctx, cancel := context.WithCancel(context.Background())
	c := &Command{ID: strconv.Itoa(t.next), Argv: append([]string(nil), argv...), Started: time.Now(),
		stdout: ring{keep: keep}, stderr: ring{keep: keep}, cancel: cancel, sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	t.cmds = append(t.cmds, c)
	t.forget()
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); c.stdout.readFrom(outR) }()
	go func() { defer readers.Done(); c.stderr.readFrom(errR) }()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer cancel()
		out, err := run(ctx, outW, errW, c.sigs)
		// The sandbox holds its own copies: the streams end when the
		// command's processes are gone.
		outW.Close()
		errW.Close()
		drained := make(chan struct{})
		go func() { readers.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(drainGrace):
			outR.Close() // a process outlived the command: stop reading
			errR.Close()
			<-drained
		}
		outR.Close()
		errR.Close()
		c.mu.Lock()
		c.ended, c.outcome, c.err = time.Now(), out, err
		c.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

// forget drops the oldest ended commands beyond MaxEnded. t.mu is held.
func (t *Table) forget() {
	ended := 0
	for _, c := range t.cmds {
		if !c.Running() {
			ended++
		}
	}
	kept := t.cmds[:0]
	for _, c := range t.cmds {
		if ended > MaxEnded && !c.Running() {
			ended--
			continue
		}
		kept = append(kept, c)
	}
	clear(t.cmds[len(kept):])
	t.cmds = kept
}

// List describes every command the table holds, in the order they started.
func (t *Table) List() []Info {
	t.mu.Lock()
	cmds := append([]*Command(nil), t.cmds...)
	t.mu.Unlock()
	out := make([]Info, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.Info())
	}
	return out
}

// Running counts the commands that run.
func (t *Table) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.cmds {
		if c.Running() {
			n++
		}
	}
	return n
}

// Get returns the command with id, or ErrUnknown.
func (t *Table) Get(id string) (*Command, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cmds {
		if c.ID == id {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknown, id)
}

// Close refuses new commands and waits until every running one has ended
// and its output is read. It does not end them: their owner does (a
// session closes its sandbox first, which ends every command in it; a
// command's Run must not wait for Close).
func (t *Table) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// Running reports whether the command still runs.
func (c *Command) Running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Done is closed when the command has ended and its output is read.
func (c *Command) Done() <-chan struct{} { return c.done }

// Info describes the command.
func (c *Command) Info() Info {
	in := Info{ID: c.ID, Argv: c.Argv, Started: c.Started, Running: c.Running()}
	if in.Running {
		return in
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	in.Ended, in.ExitCode, in.TimedOut, in.Stopped = c.ended, c.outcome.ExitCode, c.outcome.TimedOut, c.stopped
	in.Messages = append([]string(nil), c.outcome.Messages...)
	if c.err != nil {
		in.ExitCode = 125
		in.Messages = append(in.Messages, "hutch: "+c.err.Error())
	}
	return in
}

// Output is what the command's streams kept so far.
func (c *Command) Output() Output {
	var o Output
	o.Stdout, o.StdoutDropped = c.stdout.snapshot()
	o.Stderr, o.StderrDropped = c.stderr.snapshot()
	return o
}

// Stop ends the command: SIGTERM to it, SIGKILL after grace, and, should it
// still run after another grace (its reaper stopped), its end through the
// session (which may tear the sandbox down); it returns once the command
// has ended. Stopping an ended command does nothing.
func (c *Command) Stop(grace time.Duration) {
	if !c.Running() {
		return
	}
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case c.sigs <- sig:
		default:
		}
		select {
		case <-c.done:
			return
		case <-time.After(grace):
		}
	}
	c.cancel()
	<-c.done
}

// ring keeps the last keep bytes written to it and counts the rest.
type ring struct {
	keep int

	mu      sync.Mutex
	buf     []byte // grows to keep, then wraps at start
	start   int
	dropped int64
}

func (r *ring) write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(p) >= r.keep {
		r.dropped += int64(len(r.buf) + len(p) - r.keep)
		r.buf = append(r.buf[:0], p[len(p)-r.keep:]...)
		r.start = 0
		return
	}
	if room := r.keep - len(r.buf); room > 0 {
		n := min(room, len(p))
		r.buf = append(r.buf, p[:n]...)
		p = p[n:]
	}
	// Full: overwrite the oldest bytes.
	for len(p) > 0 {
		n := copy(r.buf[r.start:], p)
		r.dropped += int64(n)
		r.start = (r.start + n) % len(r.buf)
		p = p[n:]
	}
}

// snapshot is the kept bytes, oldest first, and how many were dropped.
func (r *ring) snapshot() ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]byte, 0, len(r.buf))
	out = append(out, r.buf[r.start:]...)
	out = append(out, r.buf[:r.start]...)
	return out, r.dropped
}

// readFrom reads f into the ring until its end or until it is closed.
func (r *ring) readFrom(f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			r.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
