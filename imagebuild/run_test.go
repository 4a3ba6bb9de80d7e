package imagebuild

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutchsandbox/hutch/images"
)

// A run step's root on a parent of three layers: where overlays mount
// (the probe says so), its layers, topmost first, at the merged tree's
// name, and no flattened copy built; with HUTCH_IMAGE_ROOT=flattened, or
// without a probe, the flattened copy. Either way upper/ and work/ have a
// directory for each top-level directory of the merged tree, upper's of
// the merged directory's mode (the topmost layer's), the same for both.
func TestStepRoot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := images.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"base/srv": 0o710, "base/opt": 0o750, "base/etc": 0o755, "src": 0o755} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, p), mode)
	}
	os.WriteFile(filepath.Join(dir, "base", "vmlinuz"), []byte("k"), 0o644)
	os.WriteFile(filepath.Join(dir, "src", "f"), []byte("f\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cfg"), []byte("cfg\n"), 0o644)
	p := writeSpec(t, dir, "from = \"rootfs:base\"\n[[step]]\ncopy = \"src\"\nto = \"/opt/src\"\n[[step]]\ncopy = \"cfg\"\nto = \"/etc/app.cfg\"\n[[step]]\nenv = { A = \"1\" }\n")
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, st, s, Options{}); err != nil {
		t.Fatal(err)
	}
	// The image after the second copy: stored as a build step's parent is
	// (blobs only), not the final image (whose root the build flattens).
	lock, err := ReadLock(LockPath(p))
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(lock.Steps[1].Image)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := st.Get(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(parent.Layers) != 3 {
		t.Fatalf("the parent has %d layers, want 3", len(parent.Layers))
	}
	var nov *images.NotOverlayError
	if _, err := st.OverlayLayers(parent); errors.As(err, &nov) {
		t.Skipf("no overlay form on this filesystem: %v", err)
	}
	ok := func(lower1, lower2 string) string { return "" }
	modes := func(b string) string {
		t.Helper()
		var out []string
		for _, n := range []string{"etc", "opt", "srv"} {
			fi, err := os.Stat(filepath.Join(b, "upper", n))
			if err != nil {
				t.Errorf("upper/%s: %v", n, err)
				continue
			}
			if _, err := os.Stat(filepath.Join(b, "work", n)); err != nil {
				t.Errorf("work/%s: %v", n, err)
			}
			out = append(out, n+" "+fi.Mode().Perm().String())
		}
		return strings.Join(out, ", ")
	}
	// The merged modes: /srv the base's; /opt and /etc the copy layers'
	// (a copy writes the directories above its destination 0755).
	const wantModes = "etc -rwxr-xr-x, opt -rwxr-xr-x, srv -rwx--x---"

	tmp := filepath.Join(dir, "layered")
	b, err := (&Sandbox{Store: st, ProbeOverlay: ok}).stepRoot(parent, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if b.Root != st.LayeredRoot(parent) || len(b.Layers) != 3 || b.Upper != filepath.Join(tmp, "upper") || b.Work != filepath.Join(tmp, "work") {
		t.Errorf("with overlays: %+v, want the parent's three layers at %s", b, st.LayeredRoot(parent))
	}
	if r, built := st.BuiltRoot(parent); built {
		t.Errorf("with overlays, the parent's flattened copy was built: %s", r)
	}
	if got := modes(tmp); got != wantModes {
		t.Errorf("with overlays, the upper directories' modes: %s, want %s", got, wantModes)
	}

	for name, sx := range map[string]*Sandbox{
		"HUTCH_IMAGE_ROOT=flattened": {Store: st, ProbeOverlay: ok, Env: []string{"HUTCH_IMAGE_ROOT=flattened"}},
		"no probe":                   {Store: st},
	} {
		tmp := filepath.Join(dir, strings.NewReplacer("=", "-", " ", "-").Replace(name))
		b, err := sx.stepRoot(parent, tmp)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r, built := st.BuiltRoot(parent); !built || b.Root != r || b.Layers != nil {
			t.Errorf("%s: %+v, want the flattened copy (built: %v %s)", name, b, built, r)
		}
		if got := modes(tmp); got != wantModes {
			t.Errorf("%s, the upper directories' modes: %s, want %s", name, got, wantModes)
		}
	}
	if _, err := (&Sandbox{Store: st, Env: []string{"HUTCH_IMAGE_ROOT=layered"}}).stepRoot(parent, filepath.Join(dir, "bad")); err == nil || !strings.Contains(err.Error(), "HUTCH_IMAGE_ROOT") {
		t.Errorf("HUTCH_IMAGE_ROOT=layered: %v, want the variable named", err)
	}

	// A parent with a layer its unpack could not give overlayfs's form
	// (as meta.json records it): the flattened copy, though overlays mount.
	h, err = v1.NewHash(lock.Steps[0].Image)
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Get(h)
	if err != nil {
		t.Fatal(err)
	}
	top := first.Layers[len(first.Layers)-1]
	meta := filepath.Join(st.Dir, "layers", "sha256", top.DiffID.Hex, "meta.json")
	m, err := st.Meta(top)
	if err != nil {
		t.Fatal(err)
	}
	m.OverlayForm, m.OverlayWhy = false, "refused here"
	b2, _ := json.Marshal(m)
	if err := os.WriteFile(meta, b2, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err = (&Sandbox{Store: st, ProbeOverlay: ok}).stepRoot(first, filepath.Join(dir, "not-overlay"))
	if err != nil {
		t.Fatal(err)
	}
	if r, built := st.BuiltRoot(first); !built || b.Root != r || b.Layers != nil {
		t.Errorf("a layer without overlayfs's form: %+v, want the flattened copy (built: %v %s)", b, built, r)
	}
}
