package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// buildContext writes a spec and the files it copies into a directory of
// the test user's.
func buildContext(t *testing.T, o opts, files map[string]string) string {
	t.Helper()
	dir := userDir(t)
	for n, body := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ownTree(t, o, dir)
	return dir
}

// failedBuild builds the spec name (from base, then steps) with --tag
// tag, which must fail with code and want on stderr, tagging nothing.
func failedBuild(t *testing.T, o opts, dir, name, steps, base, tag string, code int, want string) {
	t.Helper()
	os.WriteFile(filepath.Join(dir, name), []byte("from = \""+base+"\"\n"+steps), 0o644)
	r := hutch(t, o, "image", "build", "-f", filepath.Join(dir, name), "--tag", tag)
	mustCode(t, r, code)
	if !strings.Contains(r.stderr, want) {
		t.Errorf("%s: stderr lacks %q:\n%s", name, want, r.stderr)
	}
	if r := hutch(t, o, "image", "inspect", tag); r.code == 0 {
		t.Errorf("%s: the failed build tagged %s", name, tag)
	}
}

// builtDigest is the digest hutch image build printed.
func builtDigest(t *testing.T, stdout string) string {
	t.Helper()
	_, d, ok := strings.Cut(stdout, "\ndigest: ")
	if !ok {
		t.Errorf("no digest in the build's output:\n%s", stdout)
	}
	d, _, _ = strings.Cut(d, "\n")
	return d
}

// hutch image build of copy, env, workdir and run steps on a pinned
// busybox image: the run step is uid 0 with three capabilities and every
// other protection, its writes and deletions (whiteouts, an opaque
// directory) are its layer; the built image runs with --image and has the
// files and variables; a second build takes every step from the cache; a
// changed input reruns its step and those after it; --locked fails (exit
// 3) on a changed input; --no-cache reruns every step and records what
// they made, which the next build takes from the cache; --locked
// --no-cache passes on a spec that reproduces its lock file; a spec that is not valid is exit 2 naming the
// key, a failing step exit 1; neither tags anything or leaves work
// directories.
func TestImageBuild(t *testing.T) {
	reg := tr.Start(t)
	_, byDigest := reg.Push(t, "hutch-test/build-base:v1", tr.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, tr.Busybox(t)))
	eachUser(t, func(t *testing.T, o opts) {
		tag := "local/hutch-build-test:" + map[bool]string{false: "user", true: "root"}[o.root]
		dir := buildContext(t, o, map[string]string{
			"build.toml": `from = "` + byDigest + `"
[[step]]
copy = "app"
to = "/opt/app"
[[step]]
env = { APPMODE = "built" }
[[step]]
copy = "conf.txt"
to = "/etc/app/conf.txt"
[[step]]
workdir = "/opt/app"
[[step]]
run = """
set -e
echo "ran in $(pwd) APPMODE=$APPMODE id=$(id -u)"
mkdir -p /usr/share/made && echo made > /usr/share/made/file
rm /bin/wc
rm -r /opt/app/sub && mkdir /opt/app/sub && echo new > /opt/app/sub/new
mkdir /etc/app/fresh && echo x > /etc/app/fresh/y
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
chown 100:100 /etc/app/fresh/y && echo chown-ok
"""
`,
			"app/run.sh":  "#!/bin/sh\necho app-ran\n",
			"app/sub/old": "old\n",
			"conf.txt":    "conf-v1\n",
		})
		o.dir = dir
		spec := filepath.Join(dir, "build.toml")
		r := hutch(t, o, "image", "build", "-f", spec, "--tag", tag)
		mustCode(t, r, 0)
		if strings.Contains(r.stdout, "cached") || !strings.Contains(r.stdout, "step 4/5: workdir /opt/app\n") {
			t.Errorf("first build:\n%s%s", r.stdout, r.stderr)
		}
		// uid 0 with three capabilities in its own user namespace, every
		// other protection as in hutch run; chown to an unmapped id succeeds.
		for _, want := range []string{"ran in /opt/app APPMODE=built id=0\n", "CapEff:\t000000000000000b\n", "CapBnd:\t000000000000000b\n",
			"NoNewPrivs:\t1\n", "Seccomp:\t2\n", "chown-ok\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("the run step's output lacks %q:\n%s%s", want, r.stdout, r.stderr)
			}
		}
		r = hutch(t, o, "run", "--image", tag, "--", "/bin/sh", "-c", `sh /opt/app/run.sh; cat /etc/app/conf.txt; echo "APPMODE=$APPMODE"
cat /usr/share/made/file /etc/app/fresh/y; ls /opt/app/sub; [ -e /bin/wc ] && echo wc-still-there; [ -e /bin/ls ] && echo ls-kept`)
		mustCode(t, r, 0)
		if r.stdout != "app-ran\nconf-v1\nAPPMODE=built\nmade\nx\nnew\nls-kept\n" {
			t.Errorf("run on the built image: %q %s", r.stdout, r.stderr)
		}
		// The base image is as it was: the step wrote its overlay's upper
		// layer, never the store's layers beneath.
		r = hutch(t, o, "run", "--image", byDigest, "--", "/bin/sh", "-c", `[ -e /bin/wc ] && echo wc-kept; [ -e /usr/share/made ] || echo nothing-made`)
		if r.stdout != "wc-kept\nnothing-made\n" {
			t.Errorf("the base image after the build: %q %s", r.stdout, r.stderr)
		}
		lock, err := os.ReadFile(spec + ".lock")
		if err != nil || !strings.Contains(string(lock), `"base": "`+byDigest[strings.Index(byDigest, "@")+1:]) {
			t.Errorf("lock file (%v):\n%s", err, lock)
		}
		// The run step's root was overlays of its parent's three layers
		// (the image after step 4): no flattened copy of it was built.
		if roots := flattenedRoots(o, stepImage(t, spec, 4)); exists(roots) {
			t.Errorf("%s exists: the run step flattened its parent, whose layers overlays could show", roots)
		}
		// Nor was the built image's: it is stored as a pull stores one.
		if roots := flattenedRoots(o, stepImage(t, spec, 5)); exists(roots) {
			t.Errorf("%s exists: the build flattened the image it made, whose layers overlays show", roots)
		}
		sameLayer(t, o, dir, byDigest)

		r = hutch(t, o, "image", "build", "-f", spec, "--tag", tag)
		mustCode(t, r, 0)
		if strings.Count(r.stdout, ": cached: ") != 5 {
			t.Errorf("second build, every step cached:\n%s", r.stdout)
		}
		mustCode(t, hutch(t, o, "image", "build", "--locked", "-f", spec), 0)

		os.WriteFile(filepath.Join(dir, "conf.txt"), []byte("conf-v2\n"), 0o644)
		r = hutch(t, o, "image", "build", "--locked", "-f", spec, "--tag", tag)
		mustCode(t, r, 3)
		if !strings.Contains(r.stderr, "step 3 (copy conf.txt /etc/app/conf.txt): layer") || !strings.Contains(r.stderr, "nothing tagged") {
			t.Errorf("--locked mismatch:\n%s", r.stderr)
		}
		if b, _ := os.ReadFile(spec + ".lock"); string(b) != string(lock) {
			t.Error("--locked mismatch rewrote the lock file")
		}
		os.WriteFile(filepath.Join(dir, "conf.txt"), []byte("conf-v3\n"), 0o644)
		r = hutch(t, o, "image", "build", "-f", spec, "--tag", tag)
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "step 2/5: cached: ") || !strings.Contains(r.stdout, "step 3/5: copy conf.txt") || !strings.Contains(r.stdout, "step 5/5: run") {
			t.Errorf("build after a change, steps 3 and 4 rerun:\n%s", r.stdout)
		}
		r = hutch(t, o, "run", "--image", tag, "--", "cat", "/etc/app/conf.txt")
		if r.stdout != "conf-v3\n" {
			t.Errorf("the tag after the rebuild: %q %s", r.stdout, r.stderr)
		}

		// --no-cache: every step again (the run step's own output shows it
		// ran), its results recorded in the cache: the next build without
		// it takes every step from there and makes the same image.
		r = hutch(t, o, "image", "build", "--no-cache", "-f", spec, "--tag", tag)
		mustCode(t, r, 0)
		if strings.Count(r.stdout, ": not from the cache (--no-cache): ") != 5 || strings.Contains(r.stdout, ": cached: ") ||
			!strings.Contains(r.stdout, "step 5/5: not from the cache (--no-cache): run set -e") || !strings.Contains(r.stdout, "ran in /opt/app APPMODE=built id=0\n") {
			t.Errorf("--no-cache, every step rerun:\n%s%s", r.stdout, r.stderr)
		}
		noCache := builtDigest(t, r.stdout)
		r = hutch(t, o, "image", "build", "-f", spec, "--tag", tag)
		mustCode(t, r, 0)
		if strings.Count(r.stdout, ": cached: ") != 5 || strings.Contains(r.stdout, "ran in ") || builtDigest(t, r.stdout) != noCache {
			t.Errorf("the build after --no-cache, every step cached, image %s:\n%s%s", noCache, r.stdout, r.stderr)
		}
		// --locked --no-cache: the lock file checked against a rebuild
		// from scratch; copy and env steps reproduce it.
		repro := filepath.Join(dir, "repro.toml")
		os.WriteFile(repro, []byte("from = \""+byDigest+"\"\n[[step]]\ncopy = \"app\"\nto = \"/opt/app\"\n[[step]]\nenv = { APPMODE = \"built\" }\n"), 0o644)
		mustCode(t, hutch(t, o, "image", "build", "-f", repro), 0)
		r = hutch(t, o, "image", "build", "--locked", "--no-cache", "-f", repro)
		mustCode(t, r, 0)
		if strings.Count(r.stdout, ": not from the cache (--no-cache): ") != 2 || !strings.Contains(r.stdout, "matches "+repro+".lock\n") {
			t.Errorf("--locked --no-cache, a reproducible spec:\n%s%s", r.stdout, r.stderr)
		}

		// A refused spec (exit 2) and a failing run step (exit 1, the
		// command's status): nothing tagged, no work directory left in the
		// store or in TMPDIR.
		failedBuild(t, o, dir, "bad.toml", "[[step]]\ncopy = \"../etc/passwd\"\nto = \"/x\"\n", byDigest, tag+"-bad", 2,
			"bad.toml: step[1].copy: \"../etc/passwd\": want a path inside the build context")
		failedBuild(t, o, dir, "fail.toml", "[[step]]\nrun = \"echo partial > /partial; exit 3\"\n", byDigest, tag+"-fail", 1,
			"step 1/1 (run echo partial > /partial; exit 3): the command exited with status 3 (nothing tagged)")
		// The network: only the spec's allowlist (none here), through the
		// egress proxy, the denial named.
		failedBuild(t, o, dir, "net.toml", "[[step]]\nrun = \"wget -q -O /dev/null http://registry.npmjs.org/\"\n", byDigest, tag+"-net", 1,
			"network blocked by policy: destination registry.npmjs.org:80 not allowlisted")
		state := stateDir
		if o.root {
			state = filepath.Join(stateDir, "root")
		}
		if left, _ := filepath.Glob(filepath.Join(state, "data", "hutch", "images", "tmp", "*")); len(left) != 0 {
			t.Errorf("left in the store's tmp/: %v", left)
		}
		if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "hutch-build-*")); len(left) != 0 {
			t.Errorf("left in TMPDIR: %v", left)
		}
	})
}

// stepImage is the manifest digest of the image after step n (from 1)
// in the lock file of spec.
func stepImage(t *testing.T, spec string, n int) string {
	t.Helper()
	var lock struct{ Steps []struct{ Image string } }
	b, err := os.ReadFile(spec + ".lock")
	if err == nil {
		err = json.Unmarshal(b, &lock)
	}
	if err != nil || len(lock.Steps) < n {
		t.Fatalf("lock file of %s, step %d: %v\n%s", spec, n, err, b)
	}
	return lock.Steps[n-1].Image
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// sameLayer builds, in dir, a run step on a parent of three layers that
// make /etc, the top two the same layer (two identical copy steps: it is
// stacked once): by default on overlays of them (the parent is not
// flattened), then with HUTCH_IMAGE_ROOT=flattened and --no-cache on the
// parent's flattened copy (which that build makes). The step's writes,
// whiteouts and opaque directory (its files' times set: a run step's
// layer keeps them) make the same layer either way, so the two builds
// print the same digest.
func sameLayer(t *testing.T, o opts, dir, base string) {
	t.Helper()
	spec := filepath.Join(dir, "same.toml")
	os.WriteFile(filepath.Join(dir, "same.txt"), []byte("same\n"), 0o644)
	os.WriteFile(spec, []byte(`from = "`+base+`"
[[step]]
copy = "same.txt"
to = "/etc/same/same.txt"
[[step]]
copy = "same.txt"
to = "/etc/same/same.txt"
[[step]]
run = """
set -e
rm /etc/os-release /bin/wc
rm /etc/same/same.txt && mkdir /etc/same/fresh && echo fresh > /etc/same/fresh/f
touch -d @0 /etc/same/fresh/f /etc/same/fresh /etc/same /etc /bin
ls /etc/same; [ -e /etc/os-release ] || echo os-release-gone
"""
`), 0o644)
	r := hutch(t, o, "image", "build", "-f", spec)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "\nfresh\nos-release-gone\n") {
		t.Errorf("the run step on the layers:\n%s%s", r.stdout, r.stderr)
	}
	overlays := builtDigest(t, r.stdout)
	roots := flattenedRoots(o, stepImage(t, spec, 2))
	if exists(roots) {
		t.Errorf("%s exists: the run step flattened its parent, whose layers overlays could show", roots)
	}
	o.env = append(slices.Clone(o.env), "HUTCH_IMAGE_ROOT=flattened")
	r = hutch(t, o, "image", "build", "--no-cache", "-f", spec)
	mustCode(t, r, 0)
	if d := builtDigest(t, r.stdout); d != overlays {
		t.Errorf("HUTCH_IMAGE_ROOT=flattened built %s, on the layers %s: the step's layer depends on its root\n%s%s", d, overlays, r.stdout, r.stderr)
	}
	if !exists(roots) {
		t.Errorf("HUTCH_IMAGE_ROOT=flattened: the parent's flattened copy %s was not built", roots)
	}
}

// apt-get install in a run step, as the unprivileged user: Debian
// bookworm's minbase (mmdebstrap, as TestImageDebian makes it) as the
// base, the Debian archive reached through the egress proxy with the
// spec's allowlist; the package runs from the built image and its version
// is in the lock file. It downloads from the Debian archive (a minute or
// two), so it runs in CI and when HUTCH_TEST_DEBIAN=1 (debianTar).
func TestImageBuildAptGet(t *testing.T) {
	tarPath := debianTar(t)
	l, err := tarball.LayerFromFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := tr.Start(t)
	_, byDigest := reg.Push(t, "hutch-test/debian-build:bookworm", tr.Image(t, v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, l))
	o := opts{timeout: 10 * time.Minute}
	dir := buildContext(t, o, map[string]string{"build.toml": `from = "` + byDigest + `"
[network]
allow = ["deb.debian.org:80"]
[[step]]
run = "apt-get update && apt-get install -y --no-install-recommends hello"
`})
	o.dir = dir
	spec := filepath.Join(dir, "build.toml")
	r := hutch(t, o, "image", "build", "-f", spec, "--tag", "local/hutch-build-apt:1")
	mustCode(t, r, 0)
	r = hutch(t, o, "run", "--image", "local/hutch-build-apt:1", "--", "hello")
	mustCode(t, r, 0)
	if r.stdout != "Hello, world!\n" {
		t.Errorf("hello from the built image: %q %s", r.stdout, r.stderr)
	}
	lock, _ := os.ReadFile(spec + ".lock")
	if !strings.Contains(string(lock), `"hello=`) || !strings.Contains(string(lock), `"dpkg=`) {
		t.Errorf("the lock file lacks the installed versions:\n%s", lock)
	}
	// The run step's root was overlays of the base's layer: the base was
	// not flattened.
	if roots := flattenedRoots(o, byDigest); exists(roots) {
		t.Errorf("%s exists: the run step flattened the base, whose layer overlays could show", roots)
	}
}
