package mounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// entryLowers stacks, top first, the layers whose directory shows: a
// whiteout or a file cuts off what is below, an opaque directory (itself
// or a parent) contributes and cuts off the rest, a missing one is
// skipped.
func TestEntryLowers(t *testing.T) {
	d := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"l0/usr/lib", "l1/usr", "l2/usr/lib", "l3/usr/lib", "l4/usr/lib", "l5/usr/lib"} {
		mk(p)
	}
	// l3: usr is opaque (usr/lib's parent): l4 and l5 are hidden for usr/lib.
	if err := unix.Setxattr(filepath.Join(d, "l3/usr"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	rel := func(ls []string) string {
		var out []string
		for _, l := range ls {
			r, _ := filepath.Rel(d, l)
			out = append(out, r)
		}
		return strings.Join(out, " ")
	}
	layers := func(ns ...string) []string {
		var out []string
		for _, n := range ns {
			out = append(out, filepath.Join(d, n))
		}
		return out
	}
	if got := rel(entryLowers(OS, layers("l0", "l1", "l2", "l3", "l4", "l5"), "usr/lib")); got != "l0/usr/lib l2/usr/lib l3/usr/lib" {
		t.Errorf("opaque parent: %s", got)
	}
	// l6: usr/lib a whiteout; nothing below shows.
	mk("l6/usr")
	if err := unix.Mknod(filepath.Join(d, "l6/usr/lib"), unix.S_IFCHR|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if got := rel(entryLowers(OS, layers("l0", "l6", "l2"), "usr/lib")); got != "l0/usr/lib" {
		t.Errorf("whiteout: %s", got)
	}
	if got := rel(entryLowers(OS, layers("l4", "l5"), "usr")); got != "l4/usr l5/usr" {
		t.Errorf("plain: %s", got)
	}
}
