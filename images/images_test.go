package images

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

type E = tr.Entry

// upper is a layer over a base that has gone, opq/{a,b}, keep/x, lib/
// (a symlink) : it deletes gone, makes opq opaque, replaces the lib
// symlink with a directory, and adds what a rootless unpack keeps or
// skips.
func upper(t *testing.T) v1.Layer {
	return tr.Layer(t,
		E{Name: ".wh.gone"},
		E{Name: "opq/", Type: tar.TypeDir},
		E{Name: "opq/.wh..wh..opq"},
		E{Name: "opq/c", Body: "c\n"},
		E{Name: "keep/y", Body: "y\n"},
		E{Name: "lib/", Type: tar.TypeDir},
		E{Name: "lib/z", Body: "z\n"},
		E{Name: "suid", Body: "s\n", Mode: 0o4755},
		E{Name: "hard", Type: tar.TypeLink, Linkname: "keep/y"},
		E{Name: "abs-link", Type: tar.TypeSymlink, Linkname: "/etc/os-release"},
		E{Name: "null", Type: tar.TypeChar, Major: 1},
		E{Name: "fifo", Type: tar.TypeFifo},
		E{Name: "ro/", Type: tar.TypeDir, Mode: 0o555},
		E{Name: "ro/f", Body: "f\n"},
	)
}

func base(t *testing.T) v1.Layer {
	return tr.Layer(t,
		E{Name: "gone", Body: "gone\n"},
		E{Name: "opq/", Type: tar.TypeDir},
		E{Name: "opq/a", Body: "a\n"},
		E{Name: "opq/b", Body: "b\n"},
		E{Name: "keep/", Type: tar.TypeDir},
		E{Name: "keep/x", Body: "x\n"},
		E{Name: "usr/", Type: tar.TypeDir},
		E{Name: "usr/lib/", Type: tar.TypeDir},
		E{Name: "lib", Type: tar.TypeSymlink, Linkname: "usr/lib"},
	)
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
	}
	return string(b)
}

// A pull stores each blob once, unpacks rootless and flattens the layers
// as an overlay would show them.
func TestPullFlatten(t *testing.T) {
	reg := tr.Start(t)
	img := tr.Image(t, v1.Config{Env: []string{"PATH=/opt/bin:/bin"}}, base(t), upper(t))
	tag, byDigest := reg.Push(t, "test/flat:v1", img)
	s, err := Open(storeDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := reg.BlobGets()
	rep, err := s.Pull(ctx, tag, PullOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Fetched) != 2 || len(rep.Present) != 0 {
		t.Errorf("fetched %v present %v, want 2 layers fetched", rep.Fetched, rep.Present)
	}
	// The config and two layers.
	if n := reg.BlobGets() - before; n != 3 {
		t.Errorf("%d blob GETs, want 3\n%s", n, reg.Log())
	}
	root := rep.Root
	for p, want := range map[string]string{"opq/c": "c\n", "keep/x": "x\n", "keep/y": "y\n", "hard": "y\n", "lib/z": "z\n", "ro/f": "f\n"} {
		if got := read(t, filepath.Join(root, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"gone", "opq/a", "opq/b", "null", "usr/lib/z"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s exists in the root", p)
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, "lib")); err != nil || !fi.IsDir() {
		t.Errorf("lib is not the upper layer's directory: %v %v", fi, err)
	}
	if l, _ := os.Readlink(filepath.Join(root, "abs-link")); l != "/etc/os-release" {
		t.Errorf("abs-link -> %q, want it verbatim", l)
	}
	if fi, err := os.Stat(filepath.Join(root, "suid")); err != nil || fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("suid: %v %v, want 0755 without set-id", fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "ro")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v %v, want 0555", fi, err)
	}
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(root, "hard"), &a)
	syscall.Stat(filepath.Join(root, "keep/y"), &b)
	if a.Ino != b.Ino {
		t.Errorf("the hard link is not kept")
	}
	if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "/null: character device 1:0") {
		t.Errorf("skipped %q, want the device node", rep.Skipped)
	}
	if got := rep.Image.Config.Config.Env; len(got) != 1 || got[0] != "PATH=/opt/bin:/bin" {
		t.Errorf("env %q", got)
	}
	dirs := s.LayerDirs(rep.Image)
	if len(dirs) != 2 {
		t.Fatalf("layer dirs %q", dirs)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "opq", "a")); err != nil {
		t.Errorf("the lower layer's tree: %v", err)
	}
	m, _ := s.Meta(rep.Image.Layers[1])
	if m == nil || len(m.Whiteouts) != 1 || m.Whiteouts[0] != "gone" || len(m.Opaque) != 1 || m.Opaque[0] != "opq" {
		t.Errorf("meta %+v", m)
	}

	// Again, by tag and by digest: no layer is transferred.
	before = reg.BlobGets()
	for _, ref := range []string{tag, byDigest} {
		rep2, err := s.Pull(ctx, ref, PullOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep2.Fetched) != 0 || rep2.Image.Digest != rep.Image.Digest {
			t.Errorf("pull %s again: fetched %v, digest %s", ref, rep2.Fetched, rep2.Image.Digest)
		}
	}
	if n := reg.BlobGets() - before; n != 0 {
		t.Errorf("repeated pulls made %d blob GETs", n)
	}
	for _, ref := range []string{tag, byDigest, rep.Image.Digest.String(), rep.Image.Digest.String()[:19]} {
		got, err := s.Lookup(ref)
		if err != nil || got.Digest != rep.Image.Digest {
			t.Errorf("lookup %s: %v %v", ref, got, err)
		}
	}
	if _, err := s.Lookup(reg.Addr + "/test/other:v1"); err == nil {
		t.Errorf("lookup of an image not stored succeeded")
	}

	// A second image sharing the base layer stores it once.
	img2 := tr.Image(t, v1.Config{}, base(t), tr.Layer(t, E{Name: "two", Body: "2\n"}))
	tag2, _ := reg.Push(t, "test/two:v1", img2)
	rep3, err := s.Pull(ctx, tag2, PullOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep3.Present) != 1 || len(rep3.Fetched) != 1 {
		t.Errorf("shared layer: fetched %v present %v", rep3.Fetched, rep3.Present)
	}
	// Pulled by digest too, the first image has two names: rm of the tag
	// keeps it; rm of the other name removes its own layer and root, and
	// keeps the shared layer; prune then has nothing to do.
	rm, err := s.Remove(tag)
	if err != nil || len(rm.Names) != 1 || len(rm.Layers)+len(rm.Images) != 0 {
		t.Errorf("rm %s: %+v %v, want the name only", tag, rm, err)
	}
	if rm, err = s.Remove(byDigest); err != nil || len(rm.Layers) != 1 || len(rm.Images) != 1 {
		t.Errorf("rm %s removed %+v %v, want its own layer and root", byDigest, rm, err)
	}
	if _, err := os.Stat(rep.Root); err == nil {
		t.Errorf("the removed image's root remains")
	}
	if _, err := os.Stat(rep3.Root); err != nil {
		t.Errorf("the other image's root: %v", err)
	}
	rm, err = s.Prune()
	if err != nil || len(rm.Layers)+len(rm.Images)+len(rm.Blobs) != 0 {
		t.Errorf("prune: %+v %v", rm, err)
	}
}

// Entries that would write outside the layer are refused, naming the
// entry, and nothing of the pull is kept.
func TestPullRefusesTraversal(t *testing.T) {
	reg := tr.Start(t)
	cases := map[string][]E{
		"dotdot":    {{Name: "../escape", Body: "x"}},
		"absolute":  {{Name: "/abs", Body: "x"}},
		"link":      {{Name: "ok", Body: "x"}, {Name: "hl", Type: tar.TypeLink, Linkname: "../../../etc/passwd"}},
		"via-link":  {{Name: "sl", Type: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "sl/x", Body: "x"}},
		"hl-via-sl": {{Name: "sl", Type: tar.TypeSymlink, Linkname: "/etc"}, {Name: "hl", Type: tar.TypeLink, Linkname: "sl/passwd"}},
		"wh-dotdot": {{Name: ".wh..."}},
		"wh-dot":    {{Name: "d/", Type: tar.TypeDir}, {Name: "d/.wh.."}},
	}
	s, err := Open(storeDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for n, es := range cases {
		t.Run(n, func(t *testing.T) {
			tag, _ := reg.Push(t, "test/bad-"+n+":v1", tr.Image(t, v1.Config{}, tr.Layer(t, es...)))
			_, err := s.Pull(context.Background(), tag, PullOptions{})
			if err == nil || !strings.Contains(err.Error(), "layer entry") {
				t.Fatalf("pull: %v, want the entry refused", err)
			}
			t.Log(err)
		})
	}
	for _, d := range []string{"layers/sha256", "roots/sha256", "tmp"} {
		if es, _ := os.ReadDir(filepath.Join(s.Dir, d)); len(es) != 0 {
			t.Errorf("%s holds %v after refused pulls", d, es)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(s.Dir), "escape")); err == nil {
		t.Errorf("../escape was written")
	}
}

// A blob changed in the registry's storage is refused, naming its digest.
func TestPullRefusesCorruptBlob(t *testing.T) {
	reg := tr.Start(t)
	l := tr.Layer(t, E{Name: "f", Body: strings.Repeat("hutch ", 1000)})
	tag, _ := reg.Push(t, "test/corrupt:v1", tr.Image(t, v1.Config{}, l))
	d, _ := l.Digest()
	f := reg.BlobFile(d)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// (The store leaves the blob's digest to the library's verifying
	// reader on a pull: this holds the library to it, unpacked or not.)
	for _, noUnpack := range []bool{false, true} {
		s, _ := Open(storeDir(t))
		_, err = s.Pull(context.Background(), tag, PullOptions{NoUnpack: noUnpack})
		if err == nil || !strings.Contains(err.Error(), d.String()) {
			t.Fatalf("pull (no unpack %v) of a corrupt blob: %v, want an error naming %s", noUnpack, err, d)
		}
		t.Log(err)
		for _, dir := range []string{"layers/sha256", "roots/sha256", "tmp"} {
			if es, _ := os.ReadDir(filepath.Join(s.Dir, dir)); len(es) != 0 {
				t.Errorf("no unpack %v: %s holds %v after a refused pull", noUnpack, dir, es)
			}
		}
		if _, err := os.Stat(s.blobPath(d)); err == nil {
			t.Errorf("no unpack %v: the corrupt blob was kept", noUnpack)
		}
	}
}

// Plain http goes to loopback registries only.
func TestLoopbackHTTPOnly(t *testing.T) {
	rt := loopbackHTTPOnly{http.DefaultTransport}
	for _, u := range []string{"http://10.1.2.3/v2/", "http://registry.local/v2/", "http://192.168.1.1:5000/v2/"} {
		req, _ := http.NewRequest("GET", u, nil)
		if _, err := rt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "plain http") {
			t.Errorf("%s: %v, want refused", u, err)
		}
	}
	for _, h := range []string{"localhost", "127.0.0.1", "127.9.9.9", "::1"} {
		if !isLoopbackHost(h) {
			t.Errorf("%s is loopback", h)
		}
	}
}

// docker-archive tarballs and OCI layouts import like a pull.
func TestImport(t *testing.T) {
	img := tr.Image(t, v1.Config{Cmd: []string{"/bin/true"}}, base(t), upper(t))
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "img.tar")
	tag, _ := name.NewTag("example.com/test/archive:v2")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img2, _ := mutate.AppendLayers(img, tr.Layer(t, E{Name: "three", Body: "3\n"}))
	if err := lp.AppendImage(img2); err != nil {
		t.Fatal(err)
	}
	s, _ := Open(storeDir(t))
	rep, err := s.Import(context.Background(), tarPath, ImportOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Image.Names) != 1 || rep.Image.Names[0] != "example.com/test/archive:v2" {
		t.Errorf("names %q", rep.Image.Names)
	}
	if got := read(t, filepath.Join(rep.Root, "opq/c")); got != "c\n" {
		t.Errorf("opq/c = %q", got)
	}
	rep2, err := s.Import(context.Background(), filepath.Join(dir, "oci"), ImportOptions{Tag: "local/three"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Fetched) != 1 || len(rep2.Present) != 2 {
		t.Errorf("layout import: fetched %v present %v", rep2.Fetched, rep2.Present)
	}
	if _, err := s.Lookup("local/three"); err != nil {
		t.Error(err)
	}
	if _, err := s.Import(context.Background(), filepath.Join(dir), ImportOptions{}); err == nil || !strings.Contains(err.Error(), "OCI image layout") {
		t.Errorf("import of a plain directory: %v", err)
	}
}

// A pull with NoUnpack stores the verified blobs only; the first Root
// unpacks them, checking their digests again: a stored blob changed
// since is refused.
func TestPullNoUnpack(t *testing.T) {
	reg := tr.Start(t)
	tag, _ := reg.Push(t, "test/lazy:v1", tr.Image(t, v1.Config{}, base(t), upper(t)))
	s, _ := Open(storeDir(t))
	rep, err := s.Pull(context.Background(), tag, PullOptions{NoUnpack: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Root != "" || len(rep.Fetched) != 2 {
		t.Errorf("report %+v", rep)
	}
	if es, _ := os.ReadDir(filepath.Join(s.Dir, "layers", "sha256")); len(es) != 0 {
		t.Errorf("layers unpacked: %v", es)
	}
	img, err := s.Lookup(tag)
	if err != nil {
		t.Fatal(err)
	}
	// Tamper with the lower layer's stored blob: Root refuses it.
	bp := s.blobPath(img.Layers[0].Digest)
	good, _ := os.ReadFile(bp)
	bad := append([]byte{}, good...)
	bad[len(bad)/2] ^= 1
	os.WriteFile(bp, bad, 0o600)
	if _, err := s.Root(img); err == nil || !strings.Contains(err.Error(), img.Layers[0].Digest.String()) {
		t.Errorf("root from a changed blob: %v", err)
	}
	if _, err := os.Stat(bp); err == nil {
		t.Errorf("the changed blob was kept")
	}
	os.WriteFile(bp, good, 0o600)
	root, err := s.Root(img)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "opq/c")); got != "c\n" {
		t.Errorf("opq/c = %q", got)
	}
	// Pulled again with unpacking: nothing is transferred.
	if rep, err = s.Pull(context.Background(), tag, PullOptions{}); err != nil || len(rep.Fetched) != 0 {
		t.Errorf("pull again: %+v %v", rep, err)
	}
	// Another image on the same blobs, pulled with unpacking after a
	// --no-unpack pull: its layers come from the store, not the registry.
	tag2, _ := reg.Push(t, "test/lazy2:v1", tr.Image(t, v1.Config{}, base(t), upper(t), tr.Layer(t, E{Name: "x2", Body: "2"})))
	s2, _ := Open(storeDir(t))
	if _, err := s2.Pull(context.Background(), tag2, PullOptions{NoUnpack: true}); err != nil {
		t.Fatal(err)
	}
	gets := reg.BlobGets()
	rep, err = s2.Pull(context.Background(), tag2, PullOptions{Flatten: true})
	if err != nil || len(rep.Fetched) != 0 || rep.Root == "" || reg.BlobGets() != gets {
		t.Errorf("pull after a --no-unpack pull: %+v %v, %d blob GETs", rep, err, reg.BlobGets()-gets)
	}
}

// A multi-platform index (what public registries serve): the pull takes
// this machine's image, records the index, and a pull by the index's
// digest finds the same image.
func TestPullIndex(t *testing.T) {
	reg := tr.Start(t)
	mine := tr.Image(t, v1.Config{Env: []string{"MINE=1"}}, tr.Layer(t, E{Name: "mine", Body: "1"}))
	other, err := mutate.ConfigFile(tr.Image(t, v1.Config{}, tr.Layer(t, E{Name: "other", Body: "2"})), &v1.ConfigFile{OS: "linux", Architecture: "s390x"})
	if err != nil {
		t.Fatal(err)
	}
	ix := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	ref, err := name.ParseReference(reg.Addr + "/test/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, ix); err != nil {
		t.Fatal(err)
	}
	ixDigest, _ := ix.Digest()
	mineDigest, _ := mine.Digest()
	s, _ := Open(storeDir(t))
	rep, err := s.Pull(context.Background(), ref.String(), PullOptions{Flatten: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Image.Digest != mineDigest {
		t.Errorf("pulled %s, want this platform's %s", rep.Image.Digest, mineDigest)
	}
	if _, err := os.Stat(filepath.Join(rep.Root, "mine")); err != nil {
		t.Errorf("root: %v", err)
	}
	es, _ := s.List()
	if len(es) != 1 || es[0].Index != ixDigest.String() {
		t.Errorf("index entries %+v, want the index digest %s", es, ixDigest)
	}
	byIndex := ref.Context().Digest(ixDigest.String()).String()
	if img, err := s.Lookup(byIndex); err != nil || img.Digest != mineDigest {
		t.Errorf("lookup by the index's digest: %v %v", img, err)
	}
	if rep, err = s.Pull(context.Background(), byIndex, PullOptions{}); err != nil || rep.Image.Digest != mineDigest || len(rep.Fetched) != 0 {
		t.Errorf("pull by the index's digest: %+v %v", rep, err)
	}
}

// Credentials come from the Docker configuration (DOCKER_CONFIG's
// config.json), as docker login leaves them: here a registry behind basic
// authentication (a proxy on loopback in front of the real one).
func TestPullDockerConfigCredentials(t *testing.T) {
	reg := tr.Start(t)
	target, _ := url.Parse("http://" + reg.Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "hutch" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tag, _ := reg.Push(t, "test/private:v1", tr.Image(t, v1.Config{}, tr.Layer(t, E{Name: "private", Body: "p"})))
	ref := strings.Replace(tag, reg.Addr, strings.TrimPrefix(srv.URL, "http://"), 1)
	s, _ := Open(storeDir(t))

	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if _, err := s.Pull(context.Background(), ref, PullOptions{}); err == nil || (!strings.Contains(err.Error(), "UNAUTHORIZED") && !strings.Contains(err.Error(), "401")) {
		t.Fatalf("pull without credentials: %v, want refused", err)
	}
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("hutch:s3cret"))
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{"`+strings.TrimPrefix(srv.URL, "http://")+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", cfg)
	rep, err := s.Pull(context.Background(), ref, PullOptions{Flatten: true})
	if err != nil {
		t.Fatalf("pull with the Docker configuration's credentials: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rep.Root, "private")); err != nil {
		t.Error(err)
	}
}
