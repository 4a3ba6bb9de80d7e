package images

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
	"github.com/hutchsandbox/hutch/mounts"
)

// A pulled layer is in overlay form as it is unpacked: its fs/ is the
// lower directory, its whiteouts 0/0 character devices, its opaque
// directories marked user.overlay.opaque; and the layers stacked by an
// overlay mount (where one can be made here) show exactly the flattened
// root.
func TestOverlayLayers(t *testing.T) {
	reg := tr.Start(t)
	img := tr.Image(t, v1.Config{}, base(t), upper(t))
	tag, _ := reg.Push(t, "test/ovl:v1", img)
	s, err := Open(storeDir(t))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pull(context.Background(), tag, PullOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rep.Image.Layers {
		if m, err := s.Meta(l); err != nil || !m.OverlayForm || m.OverlayWhy != "" {
			t.Errorf("layer %s meta %+v %v, want it in overlay form", l.DiffID, m, err)
		}
	}
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(lowers) != 2 || lowers[0] != s.LayerDirs(rep.Image)[1] || lowers[1] != s.LayerDirs(rep.Image)[0] {
		t.Fatalf("lowers %q, want the layers' fs/, the upper layer first", lowers)
	}
	checkOverlayForm(t, lowers[0])
	if es, _ := os.ReadDir(s.tmpDir()); len(es) != 0 {
		t.Errorf("tmp/ holds %v: the layers were converted again", es)
	}
	for _, l := range rep.Image.Layers {
		if _, err := os.Stat(s.overlayPath(l.DiffID)); err == nil {
			t.Errorf("layer %s has an ovl/: converted a second time", l.DiffID)
		}
	}
	compareOverlay(t, lowers, rep.Root)
}

// checkOverlayForm: top is the upper layer's tree in overlay form.
func checkOverlayForm(t *testing.T, top string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone: mode %o rdev %d %v, want a 0/0 character device", st.Mode, st.Rdev, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(top, "opq"), overlayOpaque, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq: %s = %q %v, want y", overlayOpaque, buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(top, "keep"), overlayOpaque, buf); err == nil {
		t.Errorf("keep is marked opaque")
	}
	if fi, err := os.Stat(filepath.Join(top, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v %v, want 0555", fi, err)
	}
}

// compareOverlay mounts lowers (topmost first) read-only in a user
// namespace, as a sandbox would, and compares what it shows with the tree
// at want; it skips where no overlay can be mounted so.
func compareOverlay(t *testing.T, lowers []string, want string) {
	t.Helper()
	flat := listTree(t, want)
	// The merged view the mount plan reads (mounts.ImageFS) is the same.
	if view := listImageFS(t, lowers); view != flat {
		t.Errorf("mounts.ImageFS shows\n%s\nthe flattened root\n%s", view, flat)
	}
	// The merged view, in a user namespace as a sandbox would mount it.
	out, ok := listOverlayMount(t, lowers)
	if !ok {
		t.Skip("no overlay mount in a user namespace here")
	}
	if out != flat {
		t.Errorf("the overlay shows\n%s\nthe flattened root\n%s", out, flat)
	}
}

// listImageFS lists the merged tree of lowers as mounts.ImageFS shows it,
// in listTree's form.
func listImageFS(t *testing.T, lowers []string) string {
	t.Helper()
	root := "/nonexistent/merged"
	f := &mounts.ImageFS{Root: root, Layers: lowers}
	var lines []string
	var walk func(rel string)
	walk = func(rel string) {
		fi, err := f.Lstat(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("ImageFS lstat %s: %v", rel, err)
			return
		}
		name := "./" + rel
		if rel == "" {
			name = "."
		}
		lines = append(lines, listLine(name, fi))
		if !fi.IsDir() {
			return
		}
		names, err := f.ReadDirNames(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("ImageFS readdir %s: %v", rel, err)
			return
		}
		for _, n := range names {
			walk(filepath.Join(rel, n))
		}
	}
	walk("")
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
