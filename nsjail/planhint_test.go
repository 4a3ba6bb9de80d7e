package nsjail

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/store"
)

func TestStorePlanHint(t *testing.T) {
	st := store.At(t.TempDir())
	pre := &Prestarted{PlanHint: st.Path(store.Plans, "0123456789abcdef")}
	plan := &mounts.Plan{Stage: "/tmp", Steps: []mounts.Step{{Kind: mounts.Bind, Source: "/usr", Target: "/usr", ReadOnly: true}}}
	if err := StorePlanHint(st, pre, plan); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(pre.PlanHint)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("hint %v, %v: want a 0600 file", fi, err)
	}
	// Unchanged: not rewritten.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(pre.PlanHint, old, old)
	if err := StorePlanHint(st, pre, plan); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(pre.PlanHint); !fi.ModTime().Equal(old) {
		t.Error("an unchanged hint was rewritten")
	}
	// A hint path outside the store is never written.
	elsewhere := &Prestarted{PlanHint: filepath.Join(t.TempDir(), "0123456789abcdef")}
	if err := StorePlanHint(st, elsewhere, plan); err == nil {
		t.Error("a hint outside the store was written")
	}
}
