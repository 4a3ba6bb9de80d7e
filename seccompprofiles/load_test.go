package seccompprofiles

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/store"
)

// logBuffer collects slog records as text.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	l.buf.Reset()
	return s
}

func loadOpts(t *testing.T, st *store.Store) (LoadOptions, *logBuffer) {
	logs := &logBuffer{}
	return LoadOptions{Notify: true, Store: st, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, logs
}

// A hit gives back the same program and, once a command hits a denial, the
// same answers as a fresh compile (its tables decoded then).
func TestLoadMissThenHit(t *testing.T) {
	st := store.At(t.TempDir())
	o, logs := loadOpts(t, st)
	ctx := context.Background()
	full, err := Load(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if l := logs.take(); !strings.Contains(l, `msg="seccomp filter compiled"`) {
		t.Fatalf("first load was not compiled: %q", l)
	}
	got, err := Load(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if l := logs.take(); !strings.Contains(l, `msg="seccomp filter cache hit"`) {
		t.Fatalf("second load was not a hit: %q", l)
	}
	if !bytes.Equal(got.BPF, full.BPF) || got.Notify != full.Notify {
		t.Fatalf("program or notify flag changed: %d vs %d bytes, notify %v vs %v", len(got.BPF), len(full.BPF), got.Notify, full.Notify)
	}
	if got.Denials != nil {
		t.Error("denial tables decoded before any lookup")
	}
	for _, nr := range []uint32{unix.SYS_KEYCTL, unix.SYS_IOCTL, unix.SYS_MOUNT, 9999} {
		args := [6]uint64{0, unix.TIOCSTI}
		if w, g := full.Lookup(nr, args), got.Lookup(nr, args); w.Name != g.Name || w.Errno != g.Errno || w.Reason != g.Reason {
			t.Errorf("syscall %d: lazy lookup %+v, full %+v", nr, g, w)
		}
	}
	// Other options, another entry.
	o2 := o
	o2.WatchNetwork = true
	if _, err := Load(ctx, o2); err != nil {
		t.Fatal(err)
	}
	if l := logs.take(); !strings.Contains(l, `msg="seccomp filter compiled"`) {
		t.Errorf("other options were a hit: %q", l)
	}
	ents, _ := os.ReadDir(filepath.Join(st.Dir(), store.Seccomp.Name))
	if len(ents) != 2 {
		t.Errorf("%d entries after two distinct compiles", len(ents))
	}
}

// A corrupt entry is compiled anew and replaced.
func TestLoadCorruptEntry(t *testing.T) {
	st := store.At(t.TempDir())
	o, logs := loadOpts(t, st)
	ctx := context.Background()
	f, err := Load(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	path := st.Path(store.Seccomp, entryKey(defaultJSON, o))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"truncated":   b[:entryHead+3],
		"flipped bit": append(append([]byte(nil), b[:entryHead]...), append([]byte{b[entryHead] ^ 1}, b[entryHead+1:]...)...),
		"no header":   []byte("garbage"),
	} {
		os.WriteFile(path, bad, 0o600)
		logs.take()
		g, err := Load(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if l := logs.take(); !strings.Contains(l, "unusable, recompiling") {
			t.Errorf("%s: not recompiled: %q", name, l)
		}
		if !bytes.Equal(g.BPF, f.BPF) {
			t.Errorf("%s: recompiled program differs", name)
		}
	}
}

// A custom profile that does not parse is reported every time, never
// stored; without a store every load compiles.
func TestLoadBadProfileAndNoStore(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"defaultAction": "SCMP_ACT_NOPE"}`), 0o644)
	st := store.At(t.TempDir())
	for range 2 {
		if _, err := Load(context.Background(), LoadOptions{Profile: bad, Store: st}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Fatalf("bad profile: %v", err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(st.Dir(), store.Seccomp.Name)); len(ents) != 0 {
		t.Errorf("a profile that failed was stored: %v", ents)
	}
	if _, err := Load(context.Background(), LoadOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestLoadCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Load(ctx, LoadOptions{Store: store.At(t.TempDir())}); err == nil {
		t.Fatal("a canceled context compiled")
	}
}
