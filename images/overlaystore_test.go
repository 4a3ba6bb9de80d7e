package images

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// TestHelperStoreOnOverlay is TestMarkersOnAnOverlay's child: in its own
// user and mount namespaces it mounts an overlay at the directory
// HUTCH_TEST_OVERLAY_STORE names (lower, upper and work beside it, as a
// container's root is mounted), stores an image whose upper layer has
// whiteouts and an opaque directory in a store on it, and prints what
// came of the markers.
func TestHelperStoreOnOverlay(t *testing.T) {
	d := os.Getenv("HUTCH_TEST_OVERLAY_STORE")
	if d == "" {
		t.Skip("the helper of TestMarkersOnAnOverlay (run by it in new namespaces)")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(d, "mnt")
	opts := "lowerdir=" + filepath.Join(d, "lower") + ",upperdir=" + filepath.Join(d, "upper") + ",workdir=" + filepath.Join(d, "work") + ",userxattr"
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		os.Stdout.WriteString("NO-OVERLAY " + err.Error())
		return
	}
	s, err := Open(filepath.Join(mnt, "store"))
	if err != nil {
		t.Fatal(err)
	}
	for name, upper := range map[string]v1.Layer{
		"whiteout": tr.Layer(t, E{Name: "d/", Type: tar.TypeDir}, E{Name: "d/.wh.gone"}, E{Name: "d/new", Body: "n\n"}),
		"opaque":   tr.Layer(t, E{Name: "d/", Type: tar.TypeDir}, E{Name: "d/.wh..wh..opq"}, E{Name: "d/new", Body: "n\n"}),
	} {
		rep, err := s.Add(context.Background(), tr.Image(t, v1.Config{}, tr.Layer(t, E{Name: "d/gone", Body: "g\n"}, E{Name: "d/kept", Body: "k\n"}), upper), AddOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Meta(rep.Image.Layers[1])
		if err != nil {
			t.Fatal(err)
		}
		// What a sandbox would see: the layers' overlay, or the flattened
		// copy where the layers have no overlay form.
		root := rep.Root
		if lowers, err := s.OverlayLayers(rep.Image); err == nil {
			root = filepath.Join(d, "view-"+name)
			os.Mkdir(root, 0o755)
			if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lowers, ":")+",userxattr,index=off"); err != nil {
				t.Fatalf("%s: mount the layers' overlay: %v", name, err)
			}
		}
		var seen []string
		for _, f := range []string{"gone", "kept", "new"} {
			if _, err := os.Lstat(filepath.Join(root, "d", f)); err == nil {
				seen = append(seen, f)
			}
		}
		form := "flattened"
		if m.OverlayForm {
			form = "overlay"
		}
		os.Stdout.WriteString(name + ": " + form + " shows " + strings.Join(seen, ",") + " (" + m.OverlayWhy + ")\n")
	}
}

// A store on a filesystem that is itself an overlay (a container's root,
// mounted here as a rootless one is, with userxattr): a sandbox on an
// image sees what the image's layers say, whiteouts and opaque
// directories honoured, whichever root it gets. The overlay refuses the
// 0/0 device of a whiteout (its own whiteouts are not made through it), so
// that layer has no overlay form and the image gets its flattened copy; a
// marker the overlay took but kept to itself (its own user.overlay.
// attributes, on a kernel that does not escape them) would be seen not to
// show and refused alike; an opaque mark it stores escaped (Linux 6.7 and
// later) shows, and an overlay of the layers honours it.
func TestMarkersOnAnOverlay(t *testing.T) {
	d := t.TempDir()
	for _, sub := range []string{"lower", "upper", "work", "mnt"} {
		if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { removeTree(d) })
	out, err := inNamespaces("TestHelperStoreOnOverlay", "HUTCH_TEST_OVERLAY_STORE="+d).CombinedOutput()
	if err != nil {
		t.Fatalf("the helper: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "NO-OVERLAY") {
		t.Skipf("no overlay mount in a user namespace here: %s", out)
	}
	for name, want := range map[string]string{"whiteout": ": shows kept,new ", "opaque": ": shows new "} {
		if !strings.Contains(strings.ReplaceAll(strings.ReplaceAll(string(out), "flattened shows", "shows"), "overlay shows", "shows"), name+want) {
			t.Errorf("a store on an overlay, a layer with a %s marker: want it to show %q; the helper said:\n%s", name, want, out)
		}
	}
	if !strings.Contains(string(out), "whiteout: flattened") {
		t.Errorf("a whiteout device cannot be made through an overlay: want the flattened copy; the helper said:\n%s", out)
	}
	t.Logf("%s", out)
}
