package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// markersIn lists the overlay markers in the tree at root: its character
// devices and the directories marked opaque.
func markersIn(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	buf := make([]byte, 8)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if d.Type()&fs.ModeCharDevice != 0 {
			out = append(out, "device "+rel)
		}
		if d.IsDir() {
			if _, err := unix.Lgetxattr(p, overlayOpaque, buf); err == nil {
				out = append(out, "opaque "+rel)
			}
		}
		return nil
	})
	return out
}

// A layer whose whiteouts meet its own entries (malformed, but layers do
// it) gets markers that keep the overlay and the flattened root the same:
// a whiteout of a name the layer has as a directory makes that directory
// opaque (the flattener deletes the lower one, then brings the upper's),
// one of a name the layer has as anything else makes no device, whatever
// the tar's order; a whiteout beneath a directory marked opaque makes no
// device (overlayfs would list it); an opaque marker of a directory the
// layer replaces with a file marks nothing.
func TestMarkersMeetEntries(t *testing.T) {
	lower := tr.Layer(t,
		E{Name: "dupd/", Type: tar.TypeDir},
		E{Name: "dupd/old", Body: "old\n"},
		E{Name: "dupf", Body: "old\n"},
		E{Name: "later", Body: "old\n"},
		E{Name: "a/", Type: tar.TypeDir},
		E{Name: "a/b", Body: "b\n"},
		E{Name: "a/c", Body: "c\n"},
		E{Name: "sub/", Type: tar.TypeDir},
		E{Name: "sub/s", Body: "s\n"},
		E{Name: "plain", Body: "p\n"},
	)
	upperL := tr.Layer(t,
		E{Name: ".wh.dupd"},
		E{Name: "dupd/", Type: tar.TypeDir},
		E{Name: "dupd/new", Body: "new\n"},
		E{Name: "dupf", Body: "new\n"},
		E{Name: ".wh.dupf"},
		E{Name: ".wh.later"},
		E{Name: "later", Body: "new\n"},
		E{Name: ".wh.a"},
		E{Name: "a/.wh.b"},
		E{Name: "sub/.wh..wh..opq"},
		E{Name: "sub", Body: "now a file\n"},
		E{Name: ".wh.plain"},
		E{Name: ".wh.nolower"},
	)
	s, _ := Open(storeDir(t))
	requireUserXattrs(t, s)
	rep := addImage(t, s, AddOptions{Flatten: true}, lower, upperL)
	top := s.LayerDirs(rep.Image)[1]
	got := strings.Join(markersIn(t, top), ", ")
	if want := "opaque a, opaque dupd, device nolower, device plain"; got != want {
		t.Errorf("markers %s, want %s", got, want)
	}
	for p, want := range map[string]string{"dupd/new": "new\n", "dupf": "new\n", "later": "new\n", "sub": "now a file\n"} {
		if got := read(t, filepath.Join(rep.Root, p)); got != want {
			t.Errorf("flattened %s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"dupd/old", "a/b", "a/c", "plain", "nolower"} {
		if _, err := os.Lstat(filepath.Join(rep.Root, p)); err == nil {
			t.Errorf("flattened root has %s", p)
		}
	}
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	compareOverlay(t, lowers, rep.Root)
}

// A layer with an opaque root hides every layer below it: OverlayLayers
// stops there (overlayfs does not read a layer root's opaque mark).
func TestOverlayLayersOpaqueRoot(t *testing.T) {
	s, _ := Open(storeDir(t))
	requireUserXattrs(t, s)
	rep := addImage(t, s, AddOptions{Flatten: true},
		tr.Layer(t, E{Name: "below", Body: "b\n"}),
		tr.Layer(t, E{Name: "mid", Body: "m\n"}),
		tr.Layer(t, E{Name: ".wh..wh..opq"}, E{Name: "only", Body: "o\n"}),
		tr.Layer(t, E{Name: "top", Body: "t\n"}))
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	dirs := s.LayerDirs(rep.Image)
	if len(lowers) != 2 || lowers[0] != dirs[3] || lowers[1] != dirs[2] {
		t.Fatalf("lowers %q, want the top two layers' (of %q)", lowers, dirs)
	}
	compareOverlay(t, lowers, rep.Root)
}

// A layer that recurs in an image (the same diff id twice, as two
// identical copy steps of a build make) is stacked once, at its topmost
// place: overlayfs refuses one directory twice in lowerdir, and the
// topmost occurrence shows or hides everything the lower one would (here
// the upper a/f again over the middle layer's whiteout of it).
func TestOverlayLayersRepeated(t *testing.T) {
	s, _ := Open(storeDir(t))
	again := func() v1.Layer { return tr.Layer(t, E{Name: "a/", Type: tar.TypeDir}, E{Name: "a/f", Body: "f\n"}) }
	rep := addImage(t, s, AddOptions{Flatten: true},
		again(),
		tr.Layer(t, E{Name: "a/", Type: tar.TypeDir}, E{Name: "a/.wh.f"}, E{Name: "a/g", Body: "g\n"}),
		again())
	dirs := s.LayerDirs(rep.Image)
	if dirs[0] != dirs[2] {
		t.Fatalf("the repeated layer has two trees: %q", dirs)
	}
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(lowers) != 2 || lowers[0] != dirs[2] || lowers[1] != dirs[1] {
		t.Fatalf("lowers %q, want the repeated layer once, on top, then the middle one (of %q)", lowers, dirs)
	}
	if b, err := os.ReadFile(filepath.Join(rep.Root, "a", "f")); err != nil || string(b) != "f\n" {
		t.Errorf("the flattened a/f: %q %v, want the top layer's", b, err)
	}
	compareOverlay(t, lowers, rep.Root)
}

// A layer stored by an earlier hutch (no markers in fs/, no overlay_form
// in meta.json) still loads, flattens, and converts to ovl/ on first use.
func TestOverlayLayersOldLayer(t *testing.T) {
	s, _ := Open(storeDir(t))
	requireUserXattrs(t, s)
	rep := addImage(t, s, AddOptions{Flatten: true}, base(t), upper(t))
	for _, l := range rep.Image.Layers {
		fsDir := filepath.Join(s.layerPath(l.DiffID), "fs")
		// What an earlier hutch left: the tree without markers and a
		// meta.json without the new fields.
		filepath.WalkDir(fsDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeCharDevice != 0 {
				return os.Remove(p)
			}
			if d.IsDir() {
				unix.Lremovexattr(p, overlayOpaque)
			}
			return nil
		})
		if m := markersIn(t, fsDir); len(m) != 0 {
			t.Fatalf("markers left: %q", m)
		}
		m, err := s.Meta(l)
		if err != nil {
			t.Fatal(err)
		}
		old := map[string]any{"whiteouts": m.Whiteouts, "opaque": m.Opaque, "skipped": m.Skipped, "files": m.Files, "bytes": m.Bytes}
		b, _ := json.Marshal(old)
		if err := os.WriteFile(filepath.Join(s.layerPath(l.DiffID), "meta.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if m, err := s.Meta(l); err != nil || m.OverlayForm || m.OverlayWhy != "" {
			t.Fatalf("old meta.json: %+v %v", m, err)
		}
	}
	root, err := s.Root(rep.Image)
	if err != nil || root != rep.Root {
		t.Fatalf("root %s %v", root, err)
	}
	lowers, err := s.OverlayLayers(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(lowers) != 2 || lowers[0] != s.overlayPath(rep.Image.Layers[1].DiffID) {
		t.Fatalf("lowers %q, want the layers' ovl/", lowers)
	}
	checkOverlayForm(t, lowers[0])
	compareOverlay(t, lowers, rep.Root)
}

// Where the store's filesystem or kernel refuses a marker, the layer is
// unpacked without any (those made before the refusal are removed), its
// meta says why, its flattened root is as ever (built by Add without
// Flatten: the image needs it wherever it runs), and OverlayLayers
// refuses the image naming the layer.
func TestMarkersRefused(t *testing.T) {
	lower := tr.Layer(t,
		E{Name: "dupd/", Type: tar.TypeDir}, E{Name: "dupd/old", Body: "old\n"},
		E{Name: "gone", Body: "g\n"}, E{Name: "opq/", Type: tar.TypeDir}, E{Name: "opq/a", Body: "a\n"})
	upperL := tr.Layer(t,
		E{Name: ".wh.gone"},
		E{Name: ".wh.dupd"}, E{Name: "dupd/", Type: tar.TypeDir}, E{Name: "dupd/new", Body: "new\n"},
		E{Name: ".wh.zz"},
		E{Name: "opq/", Type: tar.TypeDir}, E{Name: "opq/.wh..wh..opq"}, E{Name: "opq/c", Body: "c\n"})
	for name, tc := range map[string]struct {
		marks markerOps
		why   string
	}{
		// gone's device and dupd's mark are made, then zz's refused.
		"mknod": {markerOps{whiteout: func(dirFD int, name string) error {
			if name == "zz" {
				return unix.EPERM
			}
			return unix.Mknodat(dirFD, name, unix.S_IFCHR|0o600, 0)
		}}, "whiteout of /zz: mknod a 0/0 character device: operation not permitted"},
		// gone's device is made, then the first opaque mark refused.
		"xattr": {markerOps{opaque: func(string) error { return unix.ENOTSUP }},
			"opaque mark on /dupd: setxattr user.overlay.opaque: operation not supported"},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := Open(storeDir(t))
			if name == "mknod" {
				requireUserXattrs(t, s) // (the opaque marks come first)
			}
			s.marks = tc.marks
			rep := addImage(t, s, AddOptions{}, lower, upperL)
			if rep.Root == "" {
				t.Fatal("Add built no flattened root for an image with a layer without overlayfs's form")
			}
			l := rep.Image.Layers[1]
			m, err := s.Meta(l)
			if err != nil || m.OverlayForm || !strings.Contains(m.OverlayWhy, tc.why) {
				t.Errorf("meta %+v %v, want no overlay form, why %q", m, err, tc.why)
			}
			if got := markersIn(t, s.LayerDirs(rep.Image)[1]); len(got) != 0 {
				t.Errorf("markers left in fs/: %q", got)
			}
			for p, want := range map[string]string{"dupd/new": "new\n", "opq/c": "c\n"} {
				if got := read(t, filepath.Join(rep.Root, p)); got != want {
					t.Errorf("flattened %s = %q, want %q", p, got, want)
				}
			}
			for _, p := range []string{"gone", "dupd/old", "opq/a", "zz"} {
				if _, err := os.Lstat(filepath.Join(rep.Root, p)); err == nil {
					t.Errorf("flattened root has %s", p)
				}
			}
			_, err = s.OverlayLayers(rep.Image)
			var ne *NotOverlayError
			if !errors.As(err, &ne) || ne.Layer != l.DiffID || !strings.Contains(err.Error(), l.DiffID.String()) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("OverlayLayers: %v, want a NotOverlayError naming %s and why", err, l.DiffID)
			}
		})
	}
}

// A whiteout in a directory that no other layer makes hides nothing, and
// an overlay of the layers would list it (overlayfs shows such a
// directory as its one layer has it): OverlayLayers refuses the image,
// naming the layer and the path, so that its root is the flattened copy;
// a whiteout in a directory a lower layer makes too is no such thing.
func TestOverlayLayersLoneWhiteout(t *testing.T) {
	s, _ := Open(storeDir(t))
	lower := tr.Layer(t, E{Name: "x/", Type: tar.TypeDir}, E{Name: "x/f", Body: "f\n"})
	rep := addImage(t, s, AddOptions{Flatten: true}, lower, tr.Layer(t, E{Name: "x/.wh.f"}, E{Name: "y/", Type: tar.TypeDir}, E{Name: "y/.wh.g"}))
	_, err := s.OverlayLayers(rep.Image)
	var le *LoneWhiteoutError
	if !errors.As(err, &le) || le.Layer != rep.Image.Layers[1].DiffID || le.Path != "y/g" || !strings.Contains(err.Error(), "/y/g") {
		t.Errorf("OverlayLayers of an image whiting out /y/g, which no layer below has: %v, want a LoneWhiteoutError naming the layer and /y/g", err)
	}
	if names := listTree(t, rep.Root); strings.Contains(names, "./x/f") || strings.Contains(names, "./y/g") || !strings.Contains(names, "./y d") {
		t.Errorf("the flattened copy:\n%s", names)
	}
	rep = addImage(t, s, AddOptions{}, lower, tr.Layer(t, E{Name: "x/.wh.f"}))
	if _, err := s.OverlayLayers(rep.Image); err != nil {
		t.Errorf("a whiteout of a lower layer's file: %v", err)
	}
}
