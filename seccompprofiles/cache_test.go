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

func newTestCache(t *testing.T) (*Cache, *logBuffer) {
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return &Cache{Dir: filepath.Join(t.TempDir(), "hutch", "seccomp"), Logger: logger}, logs
}

func TestCacheMissThenHit(t *testing.T) {
	c, logs := newTestCache(t)
	ctx := context.Background()
	key, err := Key(Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}

	f1, hit, err := c.Compile(ctx, Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if hit {
		t.Error("first compile was a hit")
	}
	if l := logs.take(); !strings.Contains(l, `msg="seccomp filter compiled"`) || !strings.Contains(l, "key="+key) {
		t.Errorf("miss log: %q", l)
	}

	f2, hit, err := c.Compile(ctx, Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !hit {
		t.Error("second compile was a miss")
	}
	if l := logs.take(); !strings.Contains(l, `msg="seccomp filter cache hit"`) || !strings.Contains(l, "key="+key) {
		t.Errorf("hit log: %q", l)
	}
	if !bytes.Equal(f1.BPF, f2.BPF) || f1.ProfileHash != f2.ProfileHash || f1.DefaultErrno != f2.DefaultErrno ||
		len(f1.Denials) != len(f2.Denials) || len(f1.DenialRules) != len(f2.DenialRules) {
		t.Error("cached filter differs from the compiled one")
	}
	tiocstiNr := uint32(nr(t, "ioctl"))
	if d := f2.Lookup(tiocstiNr, [6]uint64{0, tiocsti}); d.Errno != 1 || len(d.Args) != 1 {
		t.Errorf("cached filter's Lookup(ioctl TIOCSTI) = %+v", d)
	}

	// One file per key, private.
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != key+".json" {
		t.Fatalf("cache dir holds %v", entries)
	}
	if st, _ := os.Stat(filepath.Join(c.Dir, key+".json")); st.Mode().Perm() != 0o600 {
		t.Errorf("entry mode %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(c.Dir); st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", st.Mode().Perm())
	}

	// Other options, other key.
	if _, hit, err := c.Compile(ctx, Default(), Options{Notify: true}); err != nil || hit {
		t.Errorf("notify compile: hit=%v err=%v", hit, err)
	}
	// A changed profile, other key.
	p := Default()
	p.Syscalls[0].Comment += " (changed)"
	if _, hit, err := c.Compile(ctx, p, Options{}); err != nil || hit {
		t.Errorf("changed profile: hit=%v err=%v", hit, err)
	}
	if entries, _ := os.ReadDir(c.Dir); len(entries) != 3 {
		t.Errorf("%d entries after three distinct compiles", len(entries))
	}
}

func TestCacheCorruptEntryRecovers(t *testing.T) {
	ctx := context.Background()
	key, err := Key(Default(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	good := compileDefault(t, false)
	corruptions := map[string]func([]byte) []byte{
		"garbage":   func([]byte) []byte { return []byte("\x00\x01not json") },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"empty":     func([]byte) []byte { return nil },
		"bit flip in the program": func(b []byte) []byte {
			// Change one base64 character of the BPF.
			i := bytes.Index(b, []byte(`"bpf":"`)) + len(`"bpf":"`) + 10
			c := append([]byte(nil), b...)
			if c[i] == 'A' {
				c[i] = 'B'
			} else {
				c[i] = 'A'
			}
			return c
		},
		"other key": func(b []byte) []byte { return bytes.Replace(b, []byte(key), []byte(strings.Repeat("0", 64)), 1) },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			c, logs := newTestCache(t)
			if _, _, err := c.Compile(ctx, Default(), Options{}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(c.Dir, key+".json")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, corrupt(data), 0o600); err != nil {
				t.Fatal(err)
			}
			logs.take()
			f, hit, err := c.Compile(ctx, Default(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if hit {
				t.Error("a corrupt entry was a hit")
			}
			if !bytes.Equal(f.BPF, good.BPF) {
				t.Error("recompiled filter differs")
			}
			l := logs.take()
			if !strings.Contains(l, "seccomp filter cache entry unusable") || !strings.Contains(l, `msg="seccomp filter compiled"`) {
				t.Errorf("log: %q", l)
			}
			// Rewritten: the next one hits.
			if _, hit, err := c.Compile(ctx, Default(), Options{}); err != nil || !hit {
				t.Errorf("after recovery: hit=%v err=%v", hit, err)
			}
		})
	}
}

func TestCacheDisabled(t *testing.T) {
	c := &Cache{Logger: slog.New(slog.NewTextHandler(&logBuffer{}, nil))}
	for range 2 {
		f, hit, err := c.Compile(context.Background(), Default(), Options{})
		if err != nil || hit || len(f.BPF) == 0 {
			t.Fatalf("hit=%v err=%v", hit, err)
		}
	}
}

func TestCacheCanceledContext(t *testing.T) {
	c, _ := newTestCache(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.Compile(ctx, Default(), Options{}); err != context.Canceled {
		t.Errorf("err = %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	t.Setenv("HOME", "/home/u")
	if d := DefaultCacheDir(); d != "/x/cache/hutch/seccomp" {
		t.Errorf("with XDG_CACHE_HOME: %q", d)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	if d := DefaultCacheDir(); d != "/home/u/.cache/hutch/seccomp" {
		t.Errorf("with HOME: %q", d)
	}
	t.Setenv("HOME", "")
	if d := DefaultCacheDir(); d != "" {
		t.Errorf("with neither: %q", d)
	}
}

func BenchmarkCompileDefault(b *testing.B) {
	p := Default()
	for b.Loop() {
		if _, err := Compile(p, Options{Notify: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCacheHit(b *testing.B) {
	c := &Cache{Dir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(&logBuffer{}, nil))}
	p := Default()
	if _, _, err := c.Compile(context.Background(), p, Options{Notify: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, hit, err := c.Compile(context.Background(), p, Options{Notify: true}); err != nil || !hit {
			b.Fatal(hit, err)
		}
	}
}
