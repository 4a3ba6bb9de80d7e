package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Persistent caches (docs/CACHES.md), end to end, as the unprivileged user
// and as root: what one run writes in a cache the next run of the same
// scope finds; other scopes never see it; the caches are hutch's, never
// the host's; hutch cache ls, prune and rm; caps; policies refused.

// cachesDir is where hutch keeps the caches of the user o runs hutch as.
func cachesDir(o opts) string {
	state := stateDir
	if o.root {
		state = filepath.Join(stateDir, "root")
	}
	return filepath.Join(state, "cache", "hutch", "caches")
}

// cacheEntry is an entry of hutch cache ls --json.
type cacheEntry struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	Workspace string `json:"workspace"`
	Key       string `json:"key"`
	Dir       string `json:"dir"`
	Usage     int64  `json:"usage"`
	Cap       int64  `json:"cap"`
	InUse     bool   `json:"in_use"`
}

func cacheList(t *testing.T, o opts) []cacheEntry {
	t.Helper()
	r := hutch(t, o, "cache", "ls", "--json")
	mustCode(t, r, 0)
	var l []cacheEntry
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("cache ls --json: %v\n%s", err, r.stdout)
	}
	return l
}

func cacheOf(t *testing.T, o opts, ws, name string) *cacheEntry {
	t.Helper()
	for _, e := range cacheList(t, o) {
		if e.Name == name && (e.Workspace == ws || e.Scope == "user" && ws == "") {
			return &e
		}
	}
	return nil
}

func writePolicy(t *testing.T, o opts, body string) string {
	t.Helper()
	dir := userDir(t)
	p := filepath.Join(dir, "policy.toml")
	writeUserFile(t, p, "version = 1\n"+body)
	ownTree(t, o, dir)
	return p
}

// A file written in the Go build cache by one run is there in the next,
// in hutch's cache directory; go points at the mount; a second go test is
// served from the cache and a second go build finds its module without
// the network. --no-cache is a cold run.
func TestCacheHitAcrossRuns(t *testing.T) {
	port := goProxy(t)
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		// A module needing example.test/greet, small to compile cold (no
		// net/http).
		writeUserFile(t, filepath.Join(ws, "go.mod"), "module example.test/app\n\ngo 1.21\n\nrequire example.test/greet v1.0.0\n")
		writeUserFile(t, filepath.Join(ws, "app.go"), "package app\n\nimport \"example.test/greet\"\n\nfunc Hi() string { return greet.Hello(\"cache\") }\n")
		writeUserFile(t, filepath.Join(ws, "app_test.go"), "package app\n\nimport \"testing\"\n\nfunc TestHi(t *testing.T) {\n\tif Hi() != \"hello, cache\" {\n\t\tt.Fatal(Hi())\n\t}\n}\n")
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--", "/bin/sh", "-c", `go env GOCACHE GOMODCACHE && echo hit > "$(go env GOCACHE)/hutch-marker"`)
		mustCode(t, r, 0)
		if r.stdout != "/home/sandbox/.cache/go-build\n/home/sandbox/go/pkg/mod\n" {
			t.Errorf("go env: %q", r.stdout)
		}
		r = hutch(t, o, "run", "--", "cat", "/home/sandbox/.cache/go-build/hutch-marker")
		mustCode(t, r, 0)
		if r.stdout != "hit\n" {
			t.Errorf("run 2 read %q from the cache", r.stdout)
		}
		// On the host: in hutch's cache directory, 0700, for this workspace.
		e := cacheOf(t, o, ws, "go-build")
		if e == nil {
			t.Fatalf("hutch cache ls has no go-build of %s: %+v", ws, cacheList(t, o))
		}
		if filepath.Dir(filepath.Dir(e.Dir)) != cachesDir(o) || !strings.HasPrefix(e.Key, "ws-") {
			t.Errorf("the cache lives at %s, want beneath %s", e.Dir, cachesDir(o))
		}
		if b, err := os.ReadFile(filepath.Join(e.Dir, "hutch-marker")); err != nil || string(b) != "hit\n" {
			t.Errorf("the marker on the host: %q, %v", b, err)
		}
		if fi, err := os.Stat(e.Dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("cache directory %v, %v: want 0700", fi, err)
		}
		// --no-cache: nothing of it, and go's own default in the tmpfs HOME.
		r = hutch(t, o, "run", "--no-cache", "--", "/bin/sh", "-c", `test ! -e /home/sandbox/.cache/go-build/hutch-marker && echo "GOCACHE=${GOCACHE-unset}"`)
		mustCode(t, r, 0)
		if r.stdout != "GOCACHE=unset\n" {
			t.Errorf("--no-cache: %q", r.stdout)
		}

		// Go itself: the module downloaded in run 1 is found in run 2 with
		// no module proxy at all (GOPROXY=off), and the test result is
		// go's cached one (the same network, so the same proxy variables,
		// which net/http reads, go test's cache key).
		goenv := "export PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local GOSUMDB=off GOFLAGS=-mod=mod"
		o.timeout = 5 * time.Minute // a cold build on a busy machine
		r = hutch(t, o, "run", "--allow", fmt.Sprintf("goproxy.test:%d=127.0.0.1", port), "--", "/bin/sh", "-c",
			fmt.Sprintf("%s GOPROXY=http://goproxy.test:%d\ngo build ./... && go test ./...", goenv, port))
		mustCode(t, r, 0)
		r = hutch(t, o, "run", "--allow", fmt.Sprintf("goproxy.test:%d=127.0.0.1", port), "--", "/bin/sh", "-c", goenv+" GOPROXY=off\ngo build ./... && go test ./...")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "ok  \texample.test/app\t(cached)") {
			t.Errorf("the second go test was not served from the cache:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
}

// Workspace scopes are apart: B sees nothing of A's cache. A cache of
// scope "user" is shared.
func TestCacheScopes(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		mark := uniqueMarker(t)
		pol := writePolicy(t, o, `
[[filesystem.cache]]
name = "shared-`+mark[len(mark)-8:]+`"
target = "/home/sandbox/.cache/shared"
scope = "user"
env = ["SHARED_CACHE"]

[[filesystem.cache]]
name = "mine"
target = "/cache/mine"
`)
		a, b := userDir(t), userDir(t)
		ownTree(t, o, a)
		ownTree(t, o, b)
		oa, ob := o, o
		oa.dir, ob.dir = a, b
		r := hutch(t, oa, "run", "--policy", pol, "--", "/bin/sh", "-c", `echo a > "$GOCACHE/`+mark+`" && echo a > "$SHARED_CACHE/`+mark+`" && echo a > /cache/mine/`+mark)
		mustCode(t, r, 0)
		r = hutch(t, ob, "run", "--policy", pol, "--", "/bin/sh", "-c", `for f in "$GOCACHE/`+mark+`" /cache/mine/`+mark+` "$SHARED_CACHE/`+mark+`"; do if [ -e "$f" ]; then echo "seen $f"; else echo "absent $f"; fi; done; ls /cache`)
		mustCode(t, r, 0)
		want := "absent /home/sandbox/.cache/go-build/" + mark + "\nabsent /cache/mine/" + mark + "\nseen /home/sandbox/.cache/shared/" + mark + "\nmine\n"
		if r.stdout != want {
			t.Errorf("workspace B sees:\n%s\nwant:\n%s\nstderr:\n%s", r.stdout, want, r.stderr)
		}
		// Nothing else of hutch's cache directory is reachable: the
		// mount's parent is the sandbox's own HOME.
		r = hutch(t, oa, "run", "--policy", pol, "--", "/bin/sh", "-c", `ls -a "$GOCACHE/.."; cat /proc/self/mountinfo | grep -c "hutch/caches" ; ls "$GOCACHE/../../../.cache/hutch" 2>&1 | head -1`)
		if strings.Contains(r.stdout, "seccomp") || strings.Contains(r.stdout, "plans") || strings.Contains(r.stdout, ".lock") || strings.Contains(r.stdout, ".json") {
			t.Errorf("a sandbox reaches hutch's own files:\n%s", r.stdout)
		}
	})
}

// hutch cache ls, prune (the cap) and rm; a cache a session holds is
// neither pruned nor removed.
func TestCacheCommands(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		pol := writePolicy(t, o, `
[[filesystem.cache]]
name = "capped"
target = "/home/sandbox/.cache/capped"
size = "1MiB"
`)
		ws := userDir(t)
		ownTree(t, o, ws)
		o.dir = ws
		// Five files of 300KiB, used an hour apart: over the 1MiB cap;
		// pruning takes it to 90% of it, the oldest first.
		r := hutch(t, o, "run", "--policy", pol, "--", "/bin/sh", "-c", `cd /home/sandbox/.cache/capped && for i in 1 2 3 4 5; do head -c 307200 /dev/zero > f$i; touch -d "@$(( $(date +%s) - 3600 * (6 - i) ))" f$i; done`)
		mustCode(t, r, 0)
		e := cacheOf(t, o, ws, "capped")
		if e == nil || e.Cap != 1<<20 || e.Usage < 1500<<10 {
			t.Fatalf("cache ls: %+v", e)
		}
		r = hutch(t, o, "cache", "ls")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "SCOPE") || !strings.Contains(r.stdout, e.Key) || !strings.Contains(r.stdout, ws) {
			t.Errorf("cache ls:\n%s", r.stdout)
		}
		r = hutch(t, o, "cache", "prune")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, e.Key+"/capped: ") || !strings.Contains(r.stdout, "files removed") {
			t.Errorf("prune:\n%s", r.stdout)
		}
		for i, want := range []bool{false, false, true, true, true} {
			_, err := os.Stat(filepath.Join(e.Dir, fmt.Sprintf("f%d", i+1)))
			if (err == nil) != want {
				t.Errorf("after prune f%d exists: %v, want %v", i+1, err == nil, want)
			}
		}
		if e2 := cacheOf(t, o, ws, "capped"); e2 == nil || e2.Usage > 1<<20 {
			t.Errorf("after prune: %+v", e2)
		}

		// Held by a session: shared with a run of the same scope at the
		// same time, left alone by prune, refused by rm.
		name := startSessionWith(t, o, "--policy", pol)
		r = hutch(t, o, "exec", name, "--", "/bin/sh", "-c", "echo s > /home/sandbox/.cache/capped/from-session")
		mustCode(t, r, 0)
		r = hutch(t, o, "run", "--policy", pol, "--", "cat", "/home/sandbox/.cache/capped/from-session")
		mustCode(t, r, 0)
		if r.stdout != "s\n" {
			t.Errorf("a run beside the session read %q", r.stdout)
		}
		r = hutch(t, o, "cache", "rm", "capped")
		mustCode(t, r, 1)
		if !strings.Contains(r.stderr, e.Key+"/capped: in use by a running sandbox or session") {
			t.Errorf("rm of a held cache: %s", r.stderr)
		}
		r = hutch(t, o, "cache", "prune", "--all")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, e.Key+"/capped: in use by a running sandbox, left alone") {
			t.Errorf("prune --all with a session:\n%s", r.stdout)
		}
		if e3 := cacheOf(t, o, ws, "capped"); e3 == nil || !e3.InUse {
			t.Errorf("ls with a session: %+v", e3)
		}
		mustCode(t, hutch(t, o, "session", "stop", name), 0)

		// rm: by name in this workspace's scope, then what is missing.
		r = hutch(t, o, "cache", "rm", "capped", "nonesuch")
		mustCode(t, r, 1)
		if !strings.Contains(r.stdout, e.Key+"/capped: removed") || !strings.Contains(r.stderr, `no cache "nonesuch" in the scope `+e.Key) {
			t.Errorf("rm:\nstdout %s\nstderr %s", r.stdout, r.stderr)
		}
		if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
			t.Errorf("the removed cache is still there: %v", err)
		}
		r = hutch(t, o, "run", "--policy", pol, "--", "ls", "/home/sandbox/.cache/capped")
		mustCode(t, r, 0)
		if r.stdout != "" {
			t.Errorf("after rm the cache holds %q", r.stdout)
		}
		mustCode(t, hutch(t, o, "cache", "rm"), 2)
		r = hutch(t, o, "cache", "rm", "--scope", "workspace")
		mustCode(t, r, 0)
		if cacheOf(t, o, ws, "go-build") != nil || cacheOf(t, o, ws, "capped") != nil {
			t.Errorf("caches of the scope left after rm --scope workspace: %+v", cacheList(t, o))
		}

		// The caches of a workspace that is gone go with prune.
		gone := userDir(t)
		ownTree(t, o, gone)
		og := o
		og.dir = gone
		mustCode(t, hutch(t, og, "run", "--", "true"), 0)
		if cacheOf(t, o, gone, "go-build") == nil {
			t.Fatalf("no cache of %s: %+v", gone, cacheList(t, o))
		}
		os.RemoveAll(gone)
		r = hutch(t, o, "cache", "prune")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "go-build: removed (its workspace "+gone+" no longer exists)") || cacheOf(t, o, gone, "go-build") != nil {
			t.Errorf("prune after the workspace went:\n%s", r.stdout)
		}
	})
}

// The plan shows the caches and why; bad cache entries are refused with
// the key and what is valid.
func TestCachePlanAndPolicy(t *testing.T) {
	ws := userDir(t)
	o := opts{dir: ws}
	r := hutch(t, o, "plan", "--", "true")
	mustCode(t, r, 0)
	for _, w := range []string{"caches     persistent, read-write", "-> /home/sandbox/.cache/go-build: cache go-build, this workspace's, cap 2GiB: Go build cache (built-in; found go at /usr/local/go/bin/go)", "GOCACHE=/home/sandbox/.cache/go-build"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("plan lacks %q:\n%s", w, r.stdout)
		}
	}
	r = hutch(t, o, "plan", "--no-cache", "--", "true")
	if !strings.Contains(r.stdout, "caches     none") || strings.Contains(r.stdout, "GOCACHE") {
		t.Errorf("plan --no-cache:\n%s", r.stdout)
	}
	pol := writePolicy(t, o, `
[[filesystem.cache]]
name = "Bad.Name"
target = "rel/dir"
scope = "global"

[[filesystem.cache]]
name = "ws"
target = "/workspace/.cache"

[[filesystem.cache]]
name = "tool"
target = "/usr/share/x"
`)
	r = hutch(t, o, "run", "--policy", pol, "--", "true")
	mustCode(t, r, 125)
	for _, w := range []string{
		`filesystem.cache[0].name: "Bad.Name" is not a cache name`,
		`filesystem.cache[0].scope: unknown scope "global": want "workspace"`,
		`filesystem.cache[0].target: must be an absolute path inside the sandbox, such as "/home/sandbox/rel/dir", not "rel/dir"`,
		`filesystem.cache[1].target: cannot mount a cache at /workspace/.cache: /workspace and everything beneath it are hutch's`,
		`filesystem.cache[2].target: cannot mount a cache at /usr/share/x: /usr and everything beneath it are hutch's or the tooling tree's (read-only)`,
	} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("missing %q in:\n%s", w, r.stderr)
		}
	}
}
