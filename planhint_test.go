package hutch

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/mounts"
)

func TestWritePlanHint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plans")
	path := filepath.Join(dir, "0123456789abcdef")
	plan := &mounts.Plan{Stage: "/tmp", Steps: []mounts.Step{{Kind: mounts.Bind, Source: "/usr", Target: "/usr", ReadOnly: true}}}
	if err := writePlanHint(path, plan); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("hint %v, %v: want a 0600 file", fi, err)
	}
	// Unchanged: not rewritten.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	if err := writePlanHint(path, plan); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); !fi.ModTime().Equal(old) {
		t.Error("an unchanged hint was rewritten")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d files in the hint directory, want 1 (temporary files left?)", len(ents))
	}
}

func TestPrunePlanHints(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		p := filepath.Join(dir, string(rune('a'+i)))
		os.WriteFile(p, nil, 0o600)
		when := time.Now().Add(time.Duration(i) * time.Minute)
		os.Chtimes(p, when, when)
	}
	if err := prunePlanHints(dir, 3); err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 3 || names[0] != "c" || names[2] != "e" {
		t.Errorf("kept %v, want the three newest (c d e)", names)
	}
}
