package seclog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordWritesJSONLinesAndSummarizes(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(New(&buf), "abc123", []string{"sh", "-c", "keyctl show"})
	for i := 0; i < 3; i++ {
		r.Record(Event{Kind: KindSeccomp, Rule: "seccomp profile default", Subject: "keyctl",
			Message: "blocked by seccomp policy: keyctl", Hint: "see docs/SECCOMP.md", Level: slog.LevelWarn,
			Detail: map[string]any{"pid": 7, "args": []uint64{1, 2}}})
	}
	r.Record(Event{Kind: KindNetwork, Subject: "evil.example:443", Message: "network blocked by policy: destination evil.example:443 not allowlisted", Level: slog.LevelWarn})
	r.Record(Event{Kind: KindNetwork, Subject: "ok.example:443", Message: "allowed", Level: slog.LevelInfo})

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 5:\n%s", len(lines), buf.String())
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
		t.Fatalf("line 1 is not JSON: %v", err)
	}
	for k, want := range map[string]any{"sandbox": "abc123", "command": "sh -c keyctl show", "kind": "seccomp", "subject": "keyctl", "level": "WARN"} {
		if ev[k] != want {
			t.Errorf("%s = %v, want %v", k, ev[k], want)
		}
	}
	if d, ok := ev["detail"].(map[string]any); !ok || d["pid"] != float64(7) {
		t.Errorf("detail = %v", ev["detail"])
	}
	got := r.Summary()
	want := []string{
		"hutch: blocked by seccomp policy: keyctl (3 times); see docs/SECCOMP.md",
		"hutch: network blocked by policy: destination evil.example:443 not allowlisted (1 attempt)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("summary:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(r.Summary()) != 0 {
		t.Error("summary not reset")
	}
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state", "hutch", "security.log")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	NewRecorder(l, "x", nil).Record(Event{Kind: KindTimeout, Message: "timed out", Level: slog.LevelWarn})
	l.Close()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Dir(p))
	if di.Mode().Perm() != 0o700 {
		t.Errorf("log dir mode %v, want 0700", di.Mode().Perm())
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), `"kind":"timeout"`) {
		t.Errorf("log content: %s", b)
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if got := DefaultPath(); got != "/x/state/hutch/security.log" {
		t.Errorf("DefaultPath = %q", got)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultPath(); got != "/home/u/.local/state/hutch/security.log" {
		t.Errorf("DefaultPath = %q", got)
	}
}

func TestSummaryIsBounded(t *testing.T) {
	r := NewRecorder(Discard(), "x", nil)
	for i := 0; i < MaxSummarySubjects+10; i++ {
		r.Record(Event{Kind: KindNetwork, Subject: strings.Repeat("a", i+1), Message: "blocked", Level: slog.LevelWarn})
	}
	got := r.Summary()
	if len(got) != MaxSummarySubjects+1 {
		t.Fatalf("%d lines, want %d", len(got), MaxSummarySubjects+1)
	}
	if got[len(got)-1] != "hutch: 10 more blocked attempts of other kinds or destinations; see the security log" {
		t.Errorf("last line %q", got[len(got)-1])
	}
}

func TestWatchCountsWithoutLogging(t *testing.T) {
	var buf bytes.Buffer
	session := NewRecorder(New(&buf), "s", nil)
	exec1 := NewRecorder(New(&buf), "s", []string{"one"})
	stop := session.Watch(exec1)
	session.Record(Event{Kind: KindNetwork, Subject: "a:443", Message: "blocked a", Level: slog.LevelWarn})
	stop()
	session.Record(Event{Kind: KindNetwork, Subject: "b:443", Message: "blocked b", Level: slog.LevelWarn})
	if got := exec1.Summary(); len(got) != 1 || got[0] != "hutch: blocked a (1 attempt)" {
		t.Errorf("watcher summary %q", got)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Errorf("%d log lines, want 2 (watchers must not log twice)", n)
	}
}
