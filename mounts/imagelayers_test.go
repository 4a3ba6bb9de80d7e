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

// With ImageLayers, Build mounts a top-level directory two layers share
// as a read-only overlay of them (its Source the flattened tree's, for
// the plan's view) and binds one a single layer holds from the flattened
// tree; /etc still comes from the flattened tree.
func TestBuildImageLayers(t *testing.T) {
	d := t.TempDir()
	for _, p := range []string{"root/usr/bin", "root/usr/lib", "root/bin", "root/etc", "top/usr/bin", "top/bin", "low/usr/lib"} {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "root/etc/os-release"), []byte("ID=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Build(&Spec{Tooling: "rootfs:" + filepath.Join(d, "root"), Workspace: t.TempDir(), WorkspaceMount: "/workspace",
		Home: "/home/u", UID: 1000, GID: 1000, User: "u", Hostname: "h",
		ImageLayers: []string{filepath.Join(d, "top"), filepath.Join(d, "low")}})
	if err != nil {
		t.Fatal(err)
	}
	var usr, bin *Step
	for i := range p.Steps {
		switch p.Steps[i].Target {
		case "/usr":
			usr = &p.Steps[i]
		case "/bin":
			bin = &p.Steps[i]
		}
	}
	if usr == nil || usr.Kind != Overlay || usr.Upper != "" || usr.Source != filepath.Join(d, "root/usr") ||
		strings.Join(usr.Lower, ":") != filepath.Join(d, "top/usr")+":"+filepath.Join(d, "low/usr") {
		t.Errorf("/usr: %+v, want a read-only overlay of top/usr and low/usr", usr)
	}
	if bin == nil || bin.Kind != Bind || bin.Source != filepath.Join(d, "root/bin") || !bin.ReadOnly {
		t.Errorf("/bin: %+v, want a read-only bind of the flattened tree's", bin)
	}
}
