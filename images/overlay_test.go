package images

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// A stored layer converts to overlay form: its whiteouts become 0/0
// character devices, its opaque directories carry user.overlay.opaque,
// its files are hard links to fs/'s; and the layers stacked by an
// overlay mount (where one can be made here) show exactly the flattened
// root.
func TestOverlayLayers(t *testing.T) {
	reg := tr.Start(t)
	img := tr.Image(t, v1.Config{}, base(t), upper(t))
	tag, _ := reg.Push(t, "test/ovl:v1", img)
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Pull(context.Background(), tag, PullOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(lowers) != 2 || !strings.Contains(lowers[0], rep.Image.Layers[1].DiffID.Hex) {
		t.Fatalf("lowers %q, want the upper layer first", lowers)
	}
	top := lowers[0]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone: mode %o rdev %d %v, want a 0/0 character device", st.Mode, st.Rdev, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(top, "opq"), overlayOpaque, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq: %s = %q %v, want y", overlayOpaque, buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(top, "keep"), overlayOpaque, buf); err == nil {
		t.Errorf("keep is marked opaque")
	}
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(top, "keep/y"), &a)
	syscall.Stat(filepath.Join(s.layerPath(rep.Image.Layers[1].DiffID), "fs", "keep/y"), &b)
	if a.Ino != b.Ino {
		t.Errorf("keep/y is not a hard link to the unpacked tree's")
	}
	if fi, err := os.Stat(filepath.Join(top, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v %v, want 0555", fi, err)
	}
	// Converted once: a second call returns the same trees.
	again, err := s.OverlayLayers(rep.Image)
	if err != nil || strings.Join(again, ":") != strings.Join(lowers, ":") {
		t.Errorf("again: %q %v", again, err)
	}

	// The merged view, in a user namespace as a sandbox would mount it.
	mnt := t.TempDir()
	list := `cd "$1" && find . -printf '%p %y %m %s\n' | sort`
	script := `mount -t overlay overlay -o userxattr,index=off,lowerdir=` + strings.Join(lowers, ":") + ` "$1" || exit 42; ` + list
	out, err := exec.Command("unshare", "-Ur", "-m", "sh", "-c", script, "sh", mnt).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 42 || noCommand(err) {
		t.Skipf("no overlay mount in a user namespace here: %v %s", err, out)
	}
	if err != nil {
		t.Fatalf("overlay: %v %s", err, out)
	}
	want, err := exec.Command("sh", "-c", list, "sh", rep.Root).CombinedOutput()
	if err != nil {
		t.Fatalf("list the flattened root: %v %s", err, want)
	}
	if string(out) != string(want) {
		t.Errorf("the overlay shows\n%s\nthe flattened root\n%s", out, want)
	}
}

// noCommand: the unshare command is missing.
func noCommand(err error) bool {
	_, ok := err.(*exec.Error)
	return ok
}
