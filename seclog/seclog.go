// Package seclog is hutch's one sink for security events: every denial the
// sandbox causes (a syscall refused by seccomp, a blocked network
// destination, a resource limit hit, a timeout) becomes one JSON object on
// one line of the security log, written with log/slog. A Recorder also
// keeps a per-run summary, so the caller can be told in words what was
// blocked and why.
package seclog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/hutchsandbox/hutch/hostdirs"
)

// Event kinds.
const (
	KindSeccomp = "seccomp" // a syscall denied by the seccomp profile
	KindNetwork = "network" // a network destination blocked by policy
	KindLimit   = "limit"   // a resource limit stopped the command
	KindTimeout = "timeout" // the wall-clock timeout killed the command
	KindSandbox = "sandbox" // sandbox lifecycle notes (e.g. enforcement gaps)
	// KindWorkspace: something a command left in the workspace that the
	// host would execute and hutch could not protect (a git repository).
	KindWorkspace = "workspace"
	// KindAccess: a request to one of hutch's servers refused (`hutch mcp
	// --listen`: a missing or wrong bearer token, the session cap).
	KindAccess = "access"
)

// Event is one security event.
type Event struct {
	// Kind is one of the Kind* constants.
	Kind string
	// Rule names what decided: e.g. "seccomp profile default: keyctl",
	// "network.allow", "resources.pids".
	Rule string
	// Subject is what was blocked, in a word or two: a syscall name, a
	// destination "host:port", a limit "512MiB".
	Subject string
	// Message is the sentence for the caller, without the "hutch: " prefix.
	Message string
	// Hint, when set, follows the count in the caller's summary line
	// ("see docs/SECCOMP.md").
	Hint string
	// Detail holds further structured fields (arguments, pid, counts).
	Detail map[string]any
	// Level is slog.LevelWarn for blocks, slog.LevelInfo for allowed
	// traffic and notes.
	Level slog.Level
}

// Log writes security events as JSON lines. It is safe for concurrent use.
type Log struct {
	logger *slog.Logger
	closer io.Closer
	path   string
}

// DefaultPath is security.log in hutch's state directory
// (hostdirs.State): $XDG_STATE_HOME/hutch/security.log, or
// ~/.local/state/hutch/security.log; "" when neither is known.
func DefaultPath() string {
	if d := hostdirs.State(); d != "" {
		return filepath.Join(d, "security.log")
	}
	return ""
}

// Open appends to the log at path, creating it (0600) and its directory
// (0700) if needed, and rotates it at DefaultMaxSize keeping DefaultKeep
// old files (see OpenRotating).
func Open(path string) (*Log, error) {
	return OpenRotating(path, Rotation{})
}

// OpenRotating is Open with the rotation rot: once the file holds
// rot.MaxSize bytes it becomes PATH.1 (PATH.1 becomes PATH.2, and so on,
// up to PATH.Keep; the oldest is removed) and a new file starts. It is
// safe with other processes appending to the same log.
func OpenRotating(path string, rot Rotation) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("security log %s: create directory: %w", path, err)
	}
	f, err := openRotating(path, rot)
	if err != nil {
		return nil, fmt.Errorf("security log %s: %w (choose another file with --security-log)", path, err)
	}
	return &Log{logger: slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})), closer: f, path: path}, nil
}

// New writes events to w (for tests and embedding).
func New(w io.Writer) *Log {
	return &Log{logger: slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

// Discard returns a log that writes nothing.
func Discard() *Log { return New(io.Discard) }

// Path is the file the log writes to ("" when not a file).
func (l *Log) Path() string {
	if l == nil {
		return ""
	}
	return l.path
}

// Close closes the log file.
func (l *Log) Close() error {
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}

// Record writes ev, an event of no sandbox (a server's: KindAccess), to
// the log. A nil Log discards it.
func (l *Log) Record(ev Event) {
	if l == nil {
		return
	}
	l.logger.LogAttrs(context.Background(), ev.Level, ev.Message, eventAttrs(ev)...)
}

// NewSandboxID returns a fresh random sandbox identifier.
func NewSandboxID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Recorder records the events of one sandbox: it stamps them with the
// sandbox id and command, writes them to the log, and counts them for the
// caller's summary.
type Recorder struct {
	log     *Log
	sandbox string
	command string

	mu       sync.Mutex
	counts   map[string]int
	first    map[string]Event
	order    []string
	nEvents  int
	overflow int // blocks of subjects beyond MaxSummarySubjects
	// watchers also count the blocks recorded here (a session's proxy
	// events count for every command running at the time).
	watchers map[*Recorder]struct{}
}

// MaxSummarySubjects bounds the distinct subjects a summary lists: a
// sandbox that tries endless distinct destinations must not grow the
// supervisor's memory or the caller's stderr without bound. Every event
// still goes to the log.
const MaxSummarySubjects = 64

// NewRecorder returns a recorder for the sandbox with id sandbox running
// command (the argv, joined for display).
func NewRecorder(l *Log, sandbox string, command []string) *Recorder {
	if l == nil {
		l = Discard()
	}
	return &Recorder{log: l, sandbox: sandbox, command: displayCommand(command), counts: map[string]int{}, first: map[string]Event{}}
}

func displayCommand(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 512 {
		s = s[:509] + "..."
	}
	return s
}

// Sandbox is the recorder's sandbox id.
func (r *Recorder) Sandbox() string { return r.sandbox }

// SetCommand changes the command later events are attributed to (a
// session runs many).
func (r *Recorder) SetCommand(argv []string) {
	r.mu.Lock()
	r.command = displayCommand(argv)
	r.mu.Unlock()
}

// Watch makes w count (not log) every block recorded on r until the
// returned function is called.
func (r *Recorder) Watch(w *Recorder) (stop func()) {
	r.mu.Lock()
	if r.watchers == nil {
		r.watchers = map[*Recorder]struct{}{}
	}
	r.watchers[w] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.watchers, w)
		r.mu.Unlock()
	}
}

// Record writes ev to the log and, for blocks (Level ≥ Warn), counts it
// for the summary.
func (r *Recorder) Record(ev Event) {
	r.mu.Lock()
	cmd := r.command
	var watchers []*Recorder
	for w := range r.watchers {
		watchers = append(watchers, w)
	}
	r.mu.Unlock()
	for _, w := range watchers {
		w.count(ev)
	}
	r.count(ev)
	r.write(cmd, ev)
}

func (r *Recorder) count(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Level >= slog.LevelWarn {
		key := ev.Kind + "\x00" + ev.Subject
		switch {
		case r.counts[key] > 0:
			r.counts[key]++
		case len(r.order) < MaxSummarySubjects:
			r.first[key] = ev
			r.order = append(r.order, key)
			r.counts[key]++
		default:
			r.overflow++
		}
		r.nEvents++
	}
}

func (r *Recorder) write(cmd string, ev Event) {
	attrs := append([]slog.Attr{
		slog.String("sandbox", r.sandbox),
		slog.String("command", cmd),
	}, eventAttrs(ev)...)
	r.log.logger.LogAttrs(context.Background(), ev.Level, ev.Message, attrs...)
}

// eventAttrs are ev's kind, rule, subject and detail as log attributes.
func eventAttrs(ev Event) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("kind", ev.Kind),
		slog.String("rule", ev.Rule),
		slog.String("subject", ev.Subject),
	}
	if len(ev.Detail) > 0 {
		keys := make([]string, 0, len(ev.Detail))
		for k := range ev.Detail {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var d []any
		for _, k := range keys {
			d = append(d, slog.Any(k, ev.Detail[k]))
		}
		attrs = append(attrs, slog.Group("detail", d...))
	}
	return attrs
}

// Summary returns one "hutch: ..." line per distinct blocked subject since
// the last call, in order of first occurrence, with counts, and resets.
func (r *Recorder) Summary() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, key := range r.order {
		ev, n := r.first[key], r.counts[key]
		times := "1 time"
		if n != 1 {
			times = fmt.Sprintf("%d times", n)
		}
		if ev.Kind == KindNetwork {
			if n == 1 {
				times = "1 attempt"
			} else {
				times = fmt.Sprintf("%d attempts", n)
			}
		}
		line := fmt.Sprintf("hutch: %s (%s)", ev.Message, times)
		if ev.Kind == KindLimit || ev.Kind == KindTimeout || ev.Kind == KindWorkspace {
			line = "hutch: " + ev.Message // happens once per command; no count
		}
		if ev.Hint != "" {
			line += "; " + ev.Hint
		}
		out = append(out, line)
	}
	if r.overflow > 0 {
		where := "the security log"
		if r.log.path != "" {
			where = r.log.path
		}
		out = append(out, fmt.Sprintf("hutch: %d more blocked attempts of other kinds or destinations; see %s", r.overflow, where))
	}
	r.counts, r.first, r.order, r.nEvents, r.overflow = map[string]int{}, map[string]Event{}, nil, 0, 0
	return out
}

// Count is the number of blocks recorded since the last Summary.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nEvents
}
