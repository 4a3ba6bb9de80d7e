package review

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// layers makes a change set for a workspace and lets the test write its
// upper layer as overlayfs would: whiteouts (0/0 character devices) and
// opaque directories (user.overlay.opaque=y).
func layers(t *testing.T) (*ChangeSet, string) {
	t.Helper()
	ws := t.TempDir()
	c, err := Create(t.TempDir(), "t", Meta{Workspace: ws, Created: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return c, ws
}

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func whiteout(t *testing.T, p string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, 0); err != nil {
		t.Skipf("cannot make a whiteout (a 0/0 character device) here: %v", err)
	}
}

func listing(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, " ")
}

// A hand-made upper layer: added, modified, copied up unchanged, deleted
// (a whiteout), a replaced directory (opaque: the host's entries it did not
// make again are deleted). Diff lists exactly the changes; Apply makes the
// workspace what the sandbox saw and empties the change set.
func TestDiffApplyLayers(t *testing.T) {
	c, ws := layers(t)
	write(t, filepath.Join(ws, "same"), "same\n")
	write(t, filepath.Join(ws, "mod"), "old\n")
	write(t, filepath.Join(ws, "gone"), "x\n")
	write(t, filepath.Join(ws, "build", "old1"), "1\n")
	write(t, filepath.Join(ws, "build", "keep"), "old keep\n")
	write(t, filepath.Join(ws, "rmdir", "deep", "f"), "f\n")
	time.Sleep(20 * time.Millisecond) // the host's files are older than the sandbox's copies
	up := c.Upper()
	write(t, filepath.Join(up, "same"), "same\n")
	write(t, filepath.Join(up, "mod"), "new\n")
	write(t, filepath.Join(up, "added", "a"), "a\n")
	whiteout(t, filepath.Join(up, "gone"))
	whiteout(t, filepath.Join(up, "rmdir"))
	whiteout(t, filepath.Join(up, "never-there"))
	write(t, filepath.Join(up, "build", "keep"), "new keep\n")
	write(t, filepath.Join(up, "build", "new1"), "n\n")
	if err := unix.Setxattr(filepath.Join(up, "build"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("cannot set user xattrs here: %v", err)
	}
	d, err := Diff(c, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range d.Changes {
		got = append(got, ch.Op[:1]+" "+ch.Path)
		if ch.Conflict != "" || ch.Refused != "" {
			t.Errorf("%s: conflict %q refused %q", ch.Path, ch.Conflict, ch.Refused)
		}
	}
	want := "a added,a added/a,m build,m build/keep,a build/new1,d build/old1,d gone,m mod,d rmdir"
	if strings.Join(got, ",") != want {
		t.Errorf("diff:\n got %s\nwant %s", strings.Join(got, ","), want)
	}
	if txt := TextDiff(c, d.Changes[len(d.Changes)-2]); !strings.Contains(txt, "-old\n+new\n") {
		t.Errorf("text diff of mod: %q", txt)
	}
	out, err := Apply(c, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Skipped) != 0 || out.Left != 0 {
		t.Errorf("apply left %+v, %d", out.Skipped, out.Left)
	}
	if l := listing(t, ws); l != "added added/a build build/keep build/new1 mod same" {
		t.Errorf("workspace after apply: %s", l)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "build", "keep")); string(b) != "new keep\n" {
		t.Errorf("build/keep: %q", b)
	}
	if _, err := os.Stat(c.Dir); err == nil {
		t.Error("the applied change set is still there")
	}
}

// A partial apply inside a replaced directory takes the directory whole;
// a conflicting deletion in it stays, as a whiteout, once its opaque mark
// is gone.
func TestApplyReplacedWithConflict(t *testing.T) {
	c, ws := layers(t)
	write(t, filepath.Join(ws, "build", "old1"), "1\n")
	write(t, filepath.Join(ws, "build", "old2"), "2\n")
	write(t, filepath.Join(ws, "other"), "o\n")
	time.Sleep(20 * time.Millisecond)
	up := c.Upper()
	write(t, filepath.Join(up, "build", "new1"), "n\n")
	write(t, filepath.Join(up, "other"), "o2\n")
	if err := unix.Setxattr(filepath.Join(up, "build"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("cannot set user xattrs here: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	write(t, filepath.Join(ws, "build", "old2"), "changed on the host\n")
	out, err := Apply(c, ApplyOptions{Paths: []string{"build/new1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Skipped) != 1 || out.Skipped[0].Path != "build/old2" || !strings.Contains(out.Skipped[0].Why, "conflict") {
		t.Errorf("skipped: %+v", out.Skipped)
	}
	if l := listing(t, ws); l != "build build/new1 build/old2 other" {
		t.Errorf("workspace: %s", l)
	}
	d, err := Diff(c, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, ch := range d.Changes {
		left = append(left, ch.Op[:1]+" "+ch.Path)
	}
	if strings.Join(left, ",") != "d build/old2,m other" {
		t.Errorf("left in the change set: %v", left)
	}
}

// What an apply killed between its steps left — a temporary file linked in
// but not renamed, a file renamed into place whose upper entry was not yet
// removed — the next apply finishes: the temporary file goes, the applied
// file is not taken for a conflict, and the rest is applied.
func TestApplyAfterKill(t *testing.T) {
	c, ws := layers(t)
	write(t, filepath.Join(ws, "done"), "old\n")
	write(t, filepath.Join(ws, "half"), "old\n")
	time.Sleep(20 * time.Millisecond)
	write(t, filepath.Join(c.Upper(), "done"), "new\n")
	write(t, filepath.Join(c.Upper(), "half"), "new\n")
	time.Sleep(20 * time.Millisecond)
	// "done" was renamed into place (a new inode, changed after the
	// sandbox's copy); "half" got only as far as its temporary name.
	write(t, filepath.Join(ws, ".tmp-done"), "new\n")
	if err := os.Rename(filepath.Join(ws, ".tmp-done"), filepath.Join(ws, "done")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(ws, "done"), &st)
	tmp := TempPrefix + "x-1"
	write(t, filepath.Join(ws, tmp), "new\n")
	j := `{"path":"done","ino":` + itoa(st.Ino) + `,"temp":"` + TempPrefix + `gone"}` + "\n" +
		`{"path":"half","temp":"` + tmp + `"}` + "\n" + `{"path":"cut short`
	if err := os.WriteFile(filepath.Join(c.Dir, "journal"), []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := Apply(c, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Skipped) != 0 || out.Left != 0 || len(out.Applied) != 1 || out.Applied[0].Path != "half" {
		t.Errorf("apply after the kill: applied %+v, skipped %+v, left %d", out.Applied, out.Skipped, out.Left)
	}
	if l := listing(t, ws); l != "done half" {
		t.Errorf("workspace: %s", l)
	}
	for _, f := range []string{"done", "half"} {
		if b, _ := os.ReadFile(filepath.Join(ws, f)); string(b) != "new\n" {
			t.Errorf("%s: %q", f, b)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
