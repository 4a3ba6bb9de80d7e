package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/images"
)

// A build of copy, env and workdir steps on a rootfs base: the image has
// the files and config; a second build takes every step from the cache
// and makes the same image; a changed copy source reruns that step and
// those after it; --locked fails naming the step, tags nothing and keeps
// the lock file.
func TestBuildCopyEnvWorkdir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := images.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "base", "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "base", "bin", "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(dir, "src", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "sub", "f"), []byte("one\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cfg"), []byte("cfg\n"), 0o600)
	p := writeSpec(t, dir, `
from = "rootfs:base"
[[step]]
copy = "src"
to = "/opt/src"
[[step]]
env = { MODE = "built" }
[[step]]
copy = "cfg"
to = "/etc/app.cfg"
[[step]]
workdir = "/opt/src"
`)
	build := func(o Options) (*Result, error) {
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		return Build(ctx, st, s, o)
	}
	r1, err := build(Options{Tag: "local/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r1.Cached, []bool{false, false, false, false}) {
		t.Errorf("first build cached %v", r1.Cached)
	}
	img, err := st.Lookup("local/app:1")
	if err != nil || img.Digest != r1.Image.Digest {
		t.Fatalf("tag: %v %v", img, err)
	}
	root, err := st.Root(img)
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"bin/tool": "#!/bin/sh\n", "opt/src/sub/f": "one\n", "etc/app.cfg": "cfg\n"} {
		if b, err := os.ReadFile(filepath.Join(root, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
	if c := img.Config.Config; c.WorkingDir != "/opt/src" || !slices.Contains(c.Env, "MODE=built") {
		t.Errorf("config %+v", c)
	}
	if len(img.Layers) != 3 {
		t.Errorf("%d layers, want 3 (rootfs, two copies)", len(img.Layers))
	}
	lock, err := ReadLock(LockPath(p))
	if err != nil || lock.Image != img.Digest.String() || len(lock.Steps) != 4 || lock.Steps[1].Layer != "" || lock.Steps[2].Layer == "" {
		t.Fatalf("lock %+v %v", lock, err)
	}

	r2, err := build(Options{Tag: "local/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r2.Cached, []bool{true, true, true, true}) || r2.Image.Digest != r1.Image.Digest {
		t.Errorf("second build cached %v, image %s (first %s)", r2.Cached, r2.Image.Digest, r1.Image.Digest)
	}
	// Without the cache, the same inputs make the same layers and image.
	os.Remove(filepath.Join(st.Dir, cacheFile))
	if r, err := build(Options{}); err != nil || r.Image.Digest != r1.Image.Digest || slices.Contains(r.Cached, true) {
		t.Errorf("rebuild without the cache: %v %v", r, err)
	}
	if _, err := build(Options{Locked: true}); err != nil {
		t.Errorf("--locked on the same inputs: %v", err)
	}
	// --locked --no-cache: every step rebuilt from scratch, and it
	// reproduces the lock file.
	if r, err := build(Options{Locked: true, NoCache: true}); err != nil || slices.Contains(r.Cached, true) {
		t.Errorf("--locked --no-cache on the same inputs: %v %v", r, err)
	}

	os.WriteFile(filepath.Join(dir, "cfg"), []byte("changed\n"), 0o600)
	lockBefore, _ := os.ReadFile(LockPath(p))
	_, err = build(Options{Locked: true, Tag: "local/app:2"})
	var le *LockError
	if !errors.As(err, &le) || len(le.Diffs) != 2 {
		t.Fatalf("--locked with a changed input: %v", err)
	}
	t.Log(err)
	if _, lerr := st.Lookup("local/app:2"); lerr == nil {
		t.Error("a --locked mismatch tagged the image")
	}
	if b, _ := os.ReadFile(LockPath(p)); string(b) != string(lockBefore) {
		t.Error("a --locked mismatch rewrote the lock file")
	}
	// (The failed --locked build cached its steps: a build with another
	// change shows the rerun.)
	os.WriteFile(filepath.Join(dir, "cfg"), []byte("changed again\n"), 0o600)
	r3, err := build(Options{Tag: "local/app:2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r3.Cached, []bool{true, true, false, false}) || r3.Image.Digest == r1.Image.Digest {
		t.Errorf("after a change: cached %v", r3.Cached)
	}
	ents, _ := os.ReadDir(filepath.Join(st.Dir, "tmp"))
	for _, e := range ents {
		if e.Name() != "." {
			t.Errorf("left in the store's tmp/: %s", e.Name())
		}
	}
}

// --locked refuses a from that is not pinned by digest and a spec without
// a lock file, building nothing.
func TestBuildLockedRefusals(t *testing.T) {
	dir := t.TempDir()
	st, err := images.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "base"), 0o755)
	p := writeSpec(t, dir, "from = \"rootfs:base\"\n[[step]]\nworkdir = \"/x\"\n")
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), st, s, Options{Locked: true}); err == nil || !strings.Contains(err.Error(), "there is no lock file "+LockPath(p)) {
		t.Errorf("--locked without a lock file: %v", err)
	}
	os.WriteFile(LockPath(p), []byte(`{"base": "sha256:00"}`), 0o644)
	s.RootFS, s.From = "", "example.com/base:latest"
	var se *SpecError
	if _, err := Build(context.Background(), st, s, Options{Locked: true}); !errors.As(err, &se) || se.Key != "from" || !strings.Contains(err.Error(), "is not pinned") {
		t.Errorf("--locked with a tag: %v", err)
	}
	if es, _ := st.List(); len(es) != 0 {
		t.Errorf("a refused build named %v", es)
	}
}

// fakeRun is a RunFunc that counts its calls: a run step "count" makes a
// layer with the count in /count (a new layer every time), any other a
// layer with the command in /same (the same layer every time).
type fakeRun struct {
	dir  string
	runs map[string]int
}

func (f *fakeRun) run(_ context.Context, _ *images.Image, s Step, _ []string) (string, error) {
	f.runs[s.Command]++
	name, body := "same", s.Command
	if s.Command == "count" {
		name, body = "count", fmt.Sprint(f.runs[s.Command])
	}
	tf, err := os.CreateTemp(f.dir, "layer-*.tar")
	if err != nil {
		return "", err
	}
	defer tf.Close()
	tw := tar.NewWriter(tf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: epoch}); err != nil {
		return "", err
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		return "", err
	}
	return tf.Name(), tw.Close()
}

// newFakeBuild is a store, a spec of steps on an empty rootfs base, and a
// build of it with a fakeRun.
func newFakeBuild(t *testing.T, steps string) (*images.Store, *fakeRun, func(o Options) (*Result, string, error)) {
	t.Helper()
	dir := t.TempDir()
	st, err := images.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "base"), 0o755)
	p := writeSpec(t, dir, "from = \"rootfs:base\"\n"+steps)
	f := &fakeRun{dir: t.TempDir(), runs: map[string]int{}}
	return st, f, func(o Options) (*Result, string, error) {
		t.Helper()
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		o.Out, o.Run = &out, f.run
		r, err := Build(context.Background(), st, s, o)
		return r, out.String(), err
	}
}

// NoCache reruns every step although each is cached, says so per step,
// and records what it made: the next build without it takes that from
// the cache. With Locked, a step that does not reproduce its layer fails
// the build.
func TestBuildNoCache(t *testing.T) {
	_, f, build := newFakeBuild(t, "[[step]]\nrun = \"count\"\n[[step]]\nenv = { A = \"1\" }\n")
	r1, _, err := build(Options{})
	if err != nil {
		t.Fatal(err)
	}
	r2, out, err := build(Options{})
	if err != nil || f.runs["count"] != 1 || !slices.Equal(r2.Cached, []bool{true, true}) || r2.Image.Digest != r1.Image.Digest {
		t.Fatalf("second build: %v, %d runs, cached %v:\n%s", err, f.runs["count"], r2.Cached, out)
	}
	r3, out, err := build(Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.runs["count"] != 2 || !slices.Equal(r3.Cached, []bool{false, false}) || r3.Image.Digest == r1.Image.Digest {
		t.Errorf("--no-cache: %d runs, cached %v, image %s (the first %s)", f.runs["count"], r3.Cached, r3.Image.Digest, r1.Image.Digest)
	}
	for _, want := range []string{"step 1/2: not from the cache (--no-cache): run count\n", "step 2/2: not from the cache (--no-cache): env A=\"1\"\n"} {
		if !strings.Contains(out, want) || strings.Contains(out, "cached") {
			t.Errorf("--no-cache output lacks %q or has cached:\n%s", want, out)
		}
	}
	r4, out, err := build(Options{})
	if err != nil || f.runs["count"] != 2 || !slices.Equal(r4.Cached, []bool{true, true}) || r4.Image.Digest != r3.Image.Digest {
		t.Errorf("after --no-cache, its result from the cache: %v, %d runs, cached %v, image %s (--no-cache's %s):\n%s",
			err, f.runs["count"], r4.Cached, r4.Image.Digest, r3.Image.Digest, out)
	}
	_, _, err = build(Options{Locked: true, NoCache: true})
	var le *LockError
	if !errors.As(err, &le) || f.runs["count"] != 3 || len(le.Diffs) != 2 || !strings.HasPrefix(le.Diffs[0], "step 1 (run count): layer ") {
		t.Errorf("--locked --no-cache, a step that does not reproduce: %d runs, %v", f.runs["count"], err)
	}
}

// A run step's cache = false reruns it in every build; the steps before
// it come from the cache, and so do those after it when it made the same
// layer again.
func TestBuildStepCacheFalse(t *testing.T) {
	_, f, build := newFakeBuild(t, "[[step]]\nrun = \"before\"\n[[step]]\nrun = \"again\"\ncache = false\n[[step]]\nrun = \"after\"\n")
	if _, _, err := build(Options{}); err != nil {
		t.Fatal(err)
	}
	r, out, err := build(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Cached, []bool{true, false, true}) || f.runs["before"] != 1 || f.runs["again"] != 2 || f.runs["after"] != 1 ||
		!strings.Contains(out, "step 2/3: not from the cache (cache = false): run again\n") {
		t.Errorf("second build: cached %v, runs %v:\n%s", r.Cached, f.runs, out)
	}
}
