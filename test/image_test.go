package test

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// testImage is busybox plus a tool, an /etc that has what the mask must
// hide, a device node and an environment, as an image builder makes them.
func testImage(t *testing.T) v1.Image {
	return tr.Image(t, v1.Config{
		Env:        []string{"PATH=/opt/tool/bin:/bin", "TOOLVAR=from-image", "HOME=/root"},
		WorkingDir: "/opt", User: "root", Cmd: []string{"/bin/sh"},
	}, tr.Busybox(t), tr.Layer(t,
		tr.Entry{Name: "opt/tool/bin/hello", Body: "#!/bin/sh\necho hello-from-image\n", Mode: 0o755},
		tr.Entry{Name: "etc/shadow", Body: "root:IMAGE-SECRET:1::::::\n", Mode: 0o640},
		tr.Entry{Name: "etc/passwd", Body: "root:x:0:0:IMAGE-PASSWD:/root:/bin/sh\n"},
		tr.Entry{Name: "dev/", Type: tar.TypeDir},
		tr.Entry{Name: "dev/null", Type: tar.TypeChar, Major: 1},
		tr.Entry{Name: "setuid-tool", Body: "#!/bin/sh\nid -u\n", Mode: 0o4755},
		tr.Entry{Name: "var/lib/pkgs/status", Body: "image-package-db\n"},
		tr.Entry{Name: "var/cache/x", Body: "not bound\n"},
	))
}

// hutch run --image: the image's tree is the read-only root, its PATH and
// variables are the command's, and every protection holds as on the host's
// tooling; the digest is in the security log and the --json result.
func TestImageRun(t *testing.T) {
	reg := tr.Start(t)
	tag, byDigest := reg.Push(t, "hutch-test/tools:v1", testImage(t))
	digest := byDigest[strings.Index(byDigest, "@")+1:]
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		ownTree(t, o, ws)
		probeIn(t, ws)
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "image", "pull", tag)
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "digest: "+digest) || !strings.Contains(r.stdout, "not unpacked: /dev/null: character device 1:0") {
			t.Errorf("pull output:\n%s%s", r.stdout, r.stderr)
		}
		// The image's root as its layers (the default here) and as its
		// flattened copy: the same checks.
		for _, form := range []string{"layers", "flattened"} {
			o := o
			if form == "flattened" {
				o.env = append(o.env, "HUTCH_IMAGE_ROOT=flattened")
			}
			logPath := filepath.Join(userDir(t), "security.log")
			ownTree(t, o, filepath.Dir(logPath))
			r = hutch(t, o, "run", "--security-log", logPath, "--image", tag, "--", "/bin/sh", "-c", `id -u
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
hello; echo "TOOLVAR=$TOOLVAR HOME=$HOME PATH=$PATH"; pwd
cat /etc/os-release; cat /etc/shadow 2>&1; grep -c IMAGE-PASSWD /etc/passwd; grep -c sandbox /etc/passwd
touch /bin/x 2>&1; touch /opt/x 2>&1
[ -e /usr/local/go ] || [ -e /usr/bin/python3 ] || [ -e /usr/lib/x86_64-linux-gnu ] && echo HOST-TOOLING-VISIBLE
stat -c '%a %u' /setuid-tool; ./probe keyctl direct:80; echo ok > out.txt
cat /var/lib/pkgs/status; cat /var/cache/x 2>&1; touch /var/lib/y 2>&1; true`)
			mustCode(t, r, 0)
			for _, want := range []string{"1000\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
				"hello-from-image\n", "TOOLVAR=from-image HOME=/home/sandbox PATH=/opt/tool/bin:/bin\n", "/workspace\n", "ID=hutch-test-image\n",
				"\n0\n1\n", "touch: /bin/x: Read-only file system", "touch: /opt/x: Read-only file system", "755 1000\n", "keyctl EPERM", "direct:80 EACCES",
				"image-package-db\n", "cat: can't open '/var/cache/x': No such file or directory", "touch: /var/lib/y: Read-only file system"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%s: missing %q in:\n%s\nstderr:\n%s", form, want, r.stdout, r.stderr)
				}
			}
			for _, bad := range []string{"IMAGE-SECRET", "HOST-TOOLING-VISIBLE"} {
				if strings.Contains(r.stdout, bad) {
					t.Errorf("%s in:\n%s", bad, r.stdout)
				}
			}
			if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "ok\n" {
				t.Errorf("workspace write: %q %v", b, err)
			}
			found := false
			for _, ev := range logEvents(t, logPath) {
				if ev["rule"] == "filesystem.tooling" {
					d, _ := ev["detail"].(map[string]any)
					found = d != nil && d["digest"] == digest && d["image"] == tag
				}
			}
			if !found {
				b, _ := os.ReadFile(logPath)
				t.Errorf("%s: no filesystem.tooling event with digest %s in the security log:\n%s", form, digest, b)
			}
		}
		r = hutch(t, o, "run", "--json", "--image", byDigest, "--", "hello")
		mustCode(t, r, 0)
		var res map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res["image"] != digest || res["stdout"] != "hello-from-image\n" {
			t.Errorf("--json result %v (%v), want image %s:\n%s", res, err, digest, r.stdout)
		}
	})
}

// run --image pulls an image the store lacks, saying so; a reference that
// cannot be pulled is refused naming the tooling, and nothing runs.
func TestImageRunPullsMissing(t *testing.T) {
	reg := tr.Start(t)
	tag, _ := reg.Push(t, "hutch-test/pulled:v1", tr.Image(t, v1.Config{}, tr.Busybox(t)))
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--image", tag, "--", "cat", "/etc/os-release")
	mustCode(t, r, 0)
	if !strings.Contains(r.stderr, "hutch: image "+tag+" is not in the store: pulling it") || r.stdout != "ID=hutch-test-image\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	gets := reg.BlobGets()
	r = hutch(t, opts{dir: ws}, "run", "--image", tag, "--", "true")
	mustCode(t, r, 0)
	if strings.Contains(r.stderr, "pulling") || reg.BlobGets() != gets {
		t.Errorf("a stored image was pulled again: %s", r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "run", "--image", reg.Addr+"/hutch-test/none:v1", "--", "touch", "ran")
	mustCode(t, r, 125)
	if !strings.Contains(r.stderr, `filesystem.tooling "image:`+reg.Addr+`/hutch-test/none:v1"`) || !strings.Contains(r.stderr, "MANIFEST_UNKNOWN") {
		t.Errorf("stderr: %s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Errorf("the command ran")
	}
	r = hutch(t, opts{dir: ws}, "run", "--image", tag, "--tooling", "host", "--", "true")
	mustCode(t, r, 125)
	if !strings.Contains(r.stderr, "--image and --tooling") {
		t.Errorf("stderr: %s", r.stderr)
	}
	// The flattened root removed (as by hand, or a prune racing a run): the
	// next run builds it again, at a new path, which a plan hint of the
	// old path cannot stand in for. An image without /etc: every bind of
	// its root is optional, so that a hint whose sources are missing
	// still builds (it did, and the command was not found).
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	noEtc, _ := reg.Push(t, "hutch-test/noetc:v1", tr.Image(t, v1.Config{}, tr.Layer(t,
		tr.Entry{Name: "bin/busybox", Body: string(bb), Mode: 0o755}, tr.Entry{Name: "bin/true", Type: tar.TypeSymlink, Linkname: "busybox"})))
	// (The flattened root: HUTCH_IMAGE_ROOT=flattened, which the pull
	// builds it for.)
	flat := opts{dir: ws, env: []string{"HUTCH_IMAGE_ROOT=flattened"}}
	mustCode(t, hutch(t, flat, "image", "pull", noEtc), 0)
	r = hutch(t, flat, "image", "inspect", noEtc)
	var in struct{ Root string }
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || in.Root == "" {
		t.Fatalf("inspect: %v\n%s", err, r.stdout)
	}
	for i := 0; i < 3; i++ {
		if err := os.RemoveAll(filepath.Dir(in.Root)); err != nil {
			t.Fatal(err)
		}
		// The first run stores the plan hint that the next ones find.
		r = hutch(t, flat, "run", "--image", noEtc, "--", "true")
		if r.code != 0 {
			t.Errorf("run %d after the root was removed: exit %d %s", i, r.code, r.stderr)
		}
	}

	// A session on the image: its commands report the digest.
	name := startSession(t, ws, "--image", tag)
	r = hutch(t, opts{dir: ws}, "exec", "--json", name, "--", "cat", "/etc/os-release")
	mustCode(t, r, 0)
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !strings.HasPrefix(fmt.Sprint(res["image"]), "sha256:") || res["stdout"] != "ID=hutch-test-image\n" {
		t.Errorf("session exec --json: %v %v:\n%s", res, err, r.stdout)
	}
	// hutch mcp on the image: run_command's result names its digest.
	m := startMCP(t, hutchCmd(opts{dir: ws}, "mcp", "--image", tag))
	sc, full := m.runCommand(2, "cat /etc/os-release")
	if sc == nil || sc["stdout"] != "ID=hutch-test-image\n" || sc["image"] != res["image"] || !strings.HasPrefix(fmt.Sprint(sc["image"]), "sha256:") {
		t.Errorf("run_command on the image: %v, want image %v; stderr:\n%s", full, res["image"], m.stderr.String())
	}
	m.stop()

	// A policy names the image the same way.
	pol := filepath.Join(userDir(t), "p.toml")
	writeUserFile(t, pol, "version = 1\n[filesystem]\ntooling = \"image:"+tag+"\"\n")
	r = hutch(t, opts{dir: ws}, "run", "--policy", pol, "--", "cat", "/etc/os-release")
	mustCode(t, r, 0)
	if r.stdout != "ID=hutch-test-image\n" {
		t.Errorf("stdout %q", r.stdout)
	}
}

// hutch image ls, inspect, rm and prune; a corrupt blob is refused by the
// CLI with its digest and exit status 1.
func TestImageCLI(t *testing.T) {
	reg := tr.Start(t)
	// Another image than the other tests' (the store is the suite's).
	img, err := mutate.AppendLayers(testImage(t), tr.Layer(t, tr.Entry{Name: "cli-test", Body: "cli\n"}))
	if err != nil {
		t.Fatal(err)
	}
	tag, byDigest := reg.Push(t, "hutch-test/cli:v1", img)
	digest := byDigest[strings.Index(byDigest, "@")+1:]
	ws := userDir(t)
	o := opts{dir: ws}
	// Progress on a terminal (script(1) gives the pull one), and none
	// otherwise.
	ttyTag, _ := reg.Push(t, "hutch-test/tty:v1", tr.Image(t, v1.Config{}, tr.Layer(t, tr.Entry{Name: "tty-test", Body: "tty\n"})))
	cmd := hutchCmd(o)
	cmd.Path, cmd.Args = "/usr/bin/script", []string{"script", "-qec", hutchBin + " image pull " + ttyTag, "/dev/null"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hutch: fetching 1 layer: ") {
		t.Errorf("pull on a terminal: %v\n%q", err, out)
	}
	mustCode(t, hutch(t, o, "image", "rm", ttyTag), 0)
	r := hutch(t, o, "image", "pull", tag)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout+r.stderr, "fetching") {
		t.Errorf("progress without a terminal:\n%s%s", r.stdout, r.stderr)
	}
	r = hutch(t, o, "image", "ls")
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, tag) || !strings.Contains(r.stdout, digest[:19]) {
		t.Errorf("ls:\n%s", r.stdout)
	}
	r = hutch(t, o, "image", "inspect", tag)
	mustCode(t, r, 0)
	var in struct {
		Digest string
		Root   string
		Layers []struct {
			Skipped []string `json:"not_unpacked"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || in.Digest != digest || len(in.Layers) != 3 || len(in.Layers[1].Skipped) != 1 {
		t.Errorf("inspect (%v):\n%s", err, r.stdout)
	}
	r = hutch(t, o, "image", "inspect", reg.Addr+"/hutch-test/absent:v1")
	mustCode(t, r, 1)
	if !strings.Contains(r.stderr, "is not in hutch's image store (hutch image pull") {
		t.Errorf("inspect of an absent image: %s", r.stderr)
	}
	mustCode(t, hutch(t, o, "image", "pull"), 2)
	r = hutch(t, o, "image", "rm", tag)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "untagged "+tag) || !strings.Contains(r.stdout, "deleted image "+digest) {
		t.Errorf("rm:\n%s", r.stdout)
	}
	if _, err := os.Stat(in.Root); err == nil {
		t.Errorf("the root %s remains after rm", in.Root)
	}
	r = hutch(t, o, "image", "prune")
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "deleted 0 layers, 0 blobs") {
		t.Errorf("prune after rm:\n%s", r.stdout)
	}

	// A docker-archive tarball, imported under a name of the caller's.
	arch := filepath.Join(userDir(t), "img.tar")
	itag, _ := name.NewTag("example.com/hutch-test/archived:v1")
	if err := tarball.WriteToFile(arch, itag, img); err != nil {
		t.Fatal(err)
	}
	os.Chmod(arch, 0o644)
	r = hutch(t, o, "image", "import", "--tag", "local/imported:v1", arch)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "index.docker.io/local/imported:v1\ndigest: "+digest) {
		t.Errorf("import:\n%s%s", r.stdout, r.stderr)
	}
	r = hutch(t, o, "run", "--image", "local/imported:v1", "--", "cat", "/cli-test")
	mustCode(t, r, 0)
	if r.stdout != "cli\n" {
		t.Errorf("run on the imported image: %q %s", r.stdout, r.stderr)
	}
	mustCode(t, hutch(t, o, "image", "rm", "local/imported:v1"), 0)

	// A blob changed in the registry's storage.
	l := tr.Layer(t, tr.Entry{Name: "f", Body: strings.Repeat("x", 4096)})
	ctag, _ := reg.Push(t, "hutch-test/corrupt:v1", tr.Image(t, v1.Config{}, l))
	d, _ := l.Digest()
	b, err := os.ReadFile(reg.BlobFile(d))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	os.WriteFile(reg.BlobFile(d), b, 0o644)
	r = hutch(t, o, "image", "pull", ctag)
	mustCode(t, r, 1)
	if !strings.Contains(r.stderr, "layer "+d.String()) || !strings.Contains(r.stderr, "checksum") {
		t.Errorf("pull of a corrupt blob: %s", r.stderr)
	}
	r = hutch(t, o, "image", "ls")
	if strings.Contains(r.stdout, ctag) {
		t.Errorf("the corrupt image is listed:\n%s", r.stdout)
	}
}

// A real distribution as an image: Debian's minbase made by mmdebstrap
// (as root, from the Debian archive), pushed to the loopback registry,
// pulled and run by hutch as the unprivileged user: the dynamic loader,
// bash, coreutils and dpkg's database from the image, the hardening as
// everywhere. Downloading and unpacking it takes a minute or two, so it
// runs in CI and when HUTCH_TEST_DEBIAN=1 (debianTar).
func TestImageDebian(t *testing.T) {
	tarPath := debianTar(t)
	l, err := tarball.LayerFromFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := tr.Start(t)
	tag, byDigest := reg.Push(t, "hutch-test/debian:bookworm", tr.Image(t, v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, l))
	digest := byDigest[strings.Index(byDigest, "@")+1:]
	ws := userDir(t)
	r := hutch(t, opts{dir: ws, timeout: 5 * time.Minute}, "image", "pull", tag)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "digest: "+digest) || !strings.Contains(r.stdout, "not unpacked: /dev/") {
		t.Errorf("pull:\n%s%s", r.stdout, r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "run", "--image", tag, "--", "bash", "-c", `. /etc/os-release; echo "$ID $VERSION_CODENAME"
dpkg-query -W -f='${Package}\n' dpkg coreutils bash; id -u; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status
ls /usr/lib/x86_64-linux-gnu/libc.so.6 >/dev/null && echo libc; touch /usr/bin/x 2>&1 | grep -c 'Read-only'; echo ok > made-in-debian`)
	mustCode(t, r, 0)
	for _, want := range []string{"debian bookworm\n", "bash\ncoreutils\ndpkg\n", "1000\n", "NoNewPrivs:\t1", "Seccomp:\t2", "libc\n1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "made-in-debian")); string(b) != "ok\n" {
		t.Errorf("workspace write: %q", b)
	}
}

var (
	debianOnce sync.Once
	debianPath string
	debianSkip string
)

// debianTar is a Debian bookworm minbase root made by mmdebstrap from the
// Debian archive, as a tarball, made once per suite run (a minute or two).
// It runs in CI (root, mmdebstrap installed by make deps-test) and where
// HUTCH_TEST_DEBIAN=1; it skips, saying why, where the archive cannot be
// reached.
func debianTar(t *testing.T) string {
	t.Helper()
	if os.Getenv("HUTCH_TEST_DEBIAN") != "1" && os.Getenv("CI") == "" {
		t.Skip("set HUTCH_TEST_DEBIAN=1 (CI does) to build a Debian image with mmdebstrap from the Debian archive (a minute or two)")
	}
	if !asRoot {
		t.Skip("mmdebstrap makes a root-owned tree: the suite must run as root")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mmdebstrap is not installed, and CI must run the Debian image tests (make deps-test installs it)")
		}
		t.Skip("mmdebstrap is not installed (apt-get install mmdebstrap)")
	}
	debianOnce.Do(func() {
		p := filepath.Join(stateDir, "debian.tar")
		if out, err := exec.Command("mmdebstrap", "--variant=minbase", "--quiet", "bookworm", p,
			"deb http://deb.debian.org/debian bookworm main").CombinedOutput(); err != nil { // the sources build specs allowlist
			debianSkip = fmt.Sprintf("mmdebstrap could not make a Debian root (is the Debian archive reachable?): %v\n%s", err, out)
			return
		}
		debianPath = p
	})
	if debianPath == "" {
		t.Skip(debianSkip)
	}
	return debianPath
}
