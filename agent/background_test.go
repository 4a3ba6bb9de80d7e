package agent

import (
	"strings"
	"testing"
)

// tail keeps the end of a stream within the cap as JSON counts it, whole
// characters, and counts what it cut.
func TestTail(t *testing.T) {
	for _, c := range []struct {
		in      string
		dropped int64
		max     int
		want    string
		wantDr  int64
	}{
		{"hello\n", 0, 100, "hello\n", 0},
		{"hello\n", 5, 4, "lo\n", 8},  // "\n" is 2 in JSON
		{"aé", 0, 2, "é", 1},          // é is 2 bytes
		{"\x00ab", 0, 7, "ab", 1},     // NUL is 6
		{"\xa9xyz", 3, 100, "xyz", 4}, // a character cut at the ring's start
		{strings.Repeat("x", 10), 0, 0, "", 10},
	} {
		got, dr := tail([]byte(c.in), c.dropped, c.max)
		if got != c.want || dr != c.wantDr {
			t.Errorf("tail(%q, %d, %d) = %q, %d; want %q, %d", c.in, c.dropped, c.max, got, dr, c.want, c.wantDr)
		}
	}
}

func TestFormatBackground(t *testing.T) {
	got := FormatBackground(BackgroundResult{Commands: []BackgroundCommand{
		{ID: "1", Command: "npm run dev", Running: true, Started: "2025-01-01T00:00:00Z", Stdout: "ready on :3000\n"},
		{ID: "2", Command: "sleep 1", ExitCode: 143, Stopped: true, Started: "2025-01-01T00:00:01Z", Events: []string{"hutch: x"}},
	}}, 0)
	want := "id 1: running, started 2025-01-01T00:00:00Z: npm run dev\n--- stdout ---\nready on :3000\n" +
		"id 2: stopped (exit_code 143), started 2025-01-01T00:00:01Z: sleep 1\n--- policy_events ---\nhutch: x\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := FormatBackground(BackgroundResult{}, 0); got != "no background commands\n" {
		t.Errorf("none: %q", got)
	}
}
