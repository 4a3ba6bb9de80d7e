package images

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// storeDir is a new directory for a store, removed (removeTree) at the
// test's end: a layer's read-only directories keep an unprivileged
// t.TempDir cleanup from emptying them.
func storeDir(t *testing.T) string {
	d := t.TempDir()
	t.Cleanup(func() { removeTree(d) })
	return d
}

// addImage stores an image of layers in a new store with o.
func addImage(t *testing.T, s *Store, o AddOptions, layers ...v1.Layer) *Report {
	t.Helper()
	rep, err := s.Add(context.Background(), tr.Image(t, v1.Config{}, layers...), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Add without Flatten unpacks the layers and builds no root; Root builds
// it when asked, never at LayeredRoot's name.
func TestAddFlatten(t *testing.T) {
	s, _ := Open(storeDir(t))
	requireUserXattrs(t, s) // (upper's opaque directory; elsewhere Add flattens it: TestMarkersRefused)
	rep := addImage(t, s, AddOptions{Names: []string{"example.com/x:1"}}, base(t), upper(t))
	if rep.Root != "" {
		t.Errorf("root %q built without Flatten", rep.Root)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "roots")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("roots/: %v, want none", err)
	}
	for _, l := range rep.Image.Layers {
		if !s.hasLayer(l.DiffID) {
			t.Errorf("layer %s not unpacked", l.DiffID)
		}
	}
	if len(rep.Skipped) != 1 {
		t.Errorf("skipped %q, want the device node", rep.Skipped)
	}
	if _, err := s.OverlayLayers(rep.Image); err != nil {
		t.Error(err)
	}
	lr := s.LayeredRoot(rep.Image)
	root, err := s.Root(rep.Image)
	if err != nil {
		t.Fatal(err)
	}
	if root == lr || filepath.Dir(root) != filepath.Dir(lr) {
		t.Errorf("root %s, layered root %s: want siblings, apart", root, lr)
	}
	if _, err := os.Lstat(lr); err == nil {
		t.Errorf("the layered root %s exists on disk", lr)
	}
	if got, ok := s.BuiltRoot(rep.Image); !ok || got != root {
		t.Errorf("built root %s %v, want %s", got, ok, root)
	}

	s2, _ := Open(storeDir(t))
	rep2 := addImage(t, s2, AddOptions{Flatten: true}, base(t), upper(t))
	if got, ok := s2.BuiltRoot(rep2.Image); rep2.Root == "" || !ok || got != rep2.Root {
		t.Errorf("with Flatten: root %q, built %q %v", rep2.Root, got, ok)
	}
}
