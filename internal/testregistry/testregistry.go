// Package testregistry runs a real OCI registry (Debian's docker-registry,
// the CNCF distribution server) on loopback for tests, and builds the small
// images the tests push to it. It is used by tests only.
package testregistry

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Binary is the registry server Debian's docker-registry package installs.
const Binary = "/usr/bin/docker-registry"

// Registry is a running registry.
type Registry struct {
	// Addr is 127.0.0.1:PORT.
	Addr string
	// Storage is its filesystem storage's root directory.
	Storage string
	log     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs a registry for the test, on a free loopback port with storage
// in a temporary directory; it is stopped when the test ends. The test is
// skipped, saying why, when the package is not installed.
func Start(t testing.TB) *Registry {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Skipf("a loopback registry needs Debian's docker-registry package (make deps-test installs it): %v", err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "storage"), addr)
	cf := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Registry{Addr: addr, Storage: filepath.Join(dir, "storage"), log: &syncBuffer{}}
	cmd := exec.Command(Binary, "serve", cf)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("docker-registry exited:\n%s", r.log.String())
		default:
		}
		if i > 200 {
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, r.log.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
	return r
}

// Log is the registry's output so far (its access log among it).
func (r *Registry) Log() string { return r.log.String() }

// BlobGets counts the blob downloads in the access log (GET .../blobs/),
// once the log has settled: the registry writes a request's line after
// the response, so the last request's line can come after the client is
// done.
func (r *Registry) BlobGets() int {
	n := r.blobGets()
	for {
		time.Sleep(100 * time.Millisecond)
		m := r.blobGets()
		if m == n {
			return n
		}
		n = m
	}
}

func (r *Registry) blobGets() int {
	n := 0
	for _, l := range strings.Split(r.Log(), "\n") {
		if strings.Contains(l, `"GET /v2/`) && strings.Contains(l, "/blobs/sha256:") {
			n++
		}
	}
	return n
}

// BlobFile is where the registry keeps blob h.
func (r *Registry) BlobFile(h v1.Hash) string {
	return filepath.Join(r.Storage, "docker", "registry", "v2", "blobs", h.Algorithm, h.Hex[:2], h.Hex, "data")
}

// Push writes img to the registry as repo:tag and returns the reference
// by digest too.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) (tag, digest string) {
	t.Helper()
	ref, err := name.ParseReference(r.Addr + "/" + repoTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.String(), ref.Context().Digest(d.String()).String()
}

// Entry is one tar entry of a test layer.
type Entry struct {
	Name     string
	Type     byte // tar.Type*; 0 is a regular file
	Body     string
	Linkname string
	Mode     int64 // 0: 0644 for files, 0755 for directories
	Major    int64
}

// Layer is a gzip-compressed layer of entries.
func Layer(t testing.TB, es ...Entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Linkname, Mode: e.Mode, Devmajor: e.Major, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, e.Body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Busybox is a layer with the static busybox at /bin/busybox and the
// usual applets as symlinks, /usr/bin merged into /bin.
func Busybox(t testing.TB) v1.Layer {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("images of busybox need busybox-static (make deps-test installs it): %v", err)
	}
	es := []Entry{{Name: "bin/", Type: tar.TypeDir}, {Name: "bin/busybox", Body: string(bb), Mode: 0o755},
		{Name: "usr/", Type: tar.TypeDir}, {Name: "usr/bin", Type: tar.TypeSymlink, Linkname: "../bin"},
		{Name: "etc/", Type: tar.TypeDir}, {Name: "etc/os-release", Body: "ID=hutch-test-image\n"}}
	for _, a := range []string{"sh", "cat", "ls", "id", "touch", "echo", "env", "pwd", "grep", "stat", "wc", "true", "test", "head", "readlink"} {
		es = append(es, Entry{Name: "bin/" + a, Type: tar.TypeSymlink, Linkname: "busybox"})
	}
	return Layer(t, es...)
}

// Image stacks layers on an empty image with config's Env, WorkingDir,
// Cmd (those set).
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}
