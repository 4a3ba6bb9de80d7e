package imagebuild

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// tarNames lists a tar file's entry names.
func tarNames(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: owner %d:%d %q, want 0:0", h.Name, h.Uid, h.Gid, h.Uname)
		}
		names = append(names, h.Name)
	}
}

// An overlay upper directory as a layer: files, an xattr whiteout (Linux
// 6.7's form), a 0/0 character device whiteout (the kernel's; made here
// only as root), an opaque directory; a top-level directory left empty is
// not in it.
func TestUpperLayer(t *testing.T) {
	up := t.TempDir()
	os.MkdirAll(filepath.Join(up, "usr", "share", "new"), 0o755)
	os.WriteFile(filepath.Join(up, "usr", "share", "new", "f"), []byte("f"), 0o644)
	os.MkdirAll(filepath.Join(up, "etc", "opaque"), 0o755)
	os.WriteFile(filepath.Join(up, "etc", "opaque", "only"), nil, 0o644)
	os.WriteFile(filepath.Join(up, "etc", "gone"), nil, 0o644)
	os.Mkdir(filepath.Join(up, "var"), 0o755)
	if err := unix.Lsetxattr(filepath.Join(up, "etc", "gone"), "user.overlay.whiteout", nil, 0); err != nil {
		t.Skipf("user extended attributes on %s: %v", up, err)
	}
	if err := unix.Lsetxattr(filepath.Join(up, "etc", "opaque"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	want := []string{"usr/", "usr/share/", "usr/share/new/", "usr/share/new/f", "etc/", "etc/.wh.gone", "etc/opaque/", "etc/opaque/.wh..wh..opq", "etc/opaque/only"}
	if unix.Mknod(filepath.Join(up, "usr", "removed"), unix.S_IFCHR|0o600, 0) == nil {
		want = append(want, "usr/.wh.removed")
	} else {
		t.Log("not root: no 0/0 character device whiteout made")
	}
	p, err := upperLayer(t.TempDir(), up)
	if err != nil {
		t.Fatal(err)
	}
	got := tarNames(t, p)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("layer entries\n%q\nwant\n%q", got, want)
	}
}
