package plan

import (
	"slices"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

func cacheHost() *Host {
	h := host()
	h.CacheRoot = "/home/u/.cache/hutch/caches"
	h.Tools = map[string]string{"go": "/usr/local/go/bin/go", "npm": "/usr/bin/npm"}
	return h
}

func cacheNamed(sb *Sandbox, name string) *Cache {
	for i := range sb.Caches {
		if sb.Caches[i].Name == name {
			return &sb.Caches[i]
		}
	}
	return nil
}

// The built-in caches are those of the tools found, per workspace, bound
// read-write from hutch's cache directory, with their variables set.
func TestBuildDefaultCaches(t *testing.T) {
	sb, err := Build(policy.Default(), cacheHost(), &Request{Argv: []string{"go", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range sb.Caches {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"go-build", "go-mod", "npm"}) {
		t.Fatalf("caches %v, want those of go and npm", names)
	}
	gb := cacheNamed(sb, "go-build")
	if !strings.HasPrefix(gb.Key, "ws-proj-") || gb.Dir != "/home/u/.cache/hutch/caches/"+gb.Key+"/go-build" || gb.Target != "/home/sandbox/.cache/go-build" || gb.Scope != policy.CacheScopeWorkspace {
		t.Errorf("go-build %+v", gb)
	}
	st := step(sb, mounts.Bind, "/home/sandbox/.cache/go-build")
	if st == nil || st.ReadOnly || st.Source != gb.Dir || !strings.Contains(st.Why, "found go at /usr/local/go/bin/go") {
		t.Errorf("bind step %+v", st)
	}
	if v, _ := envOf(sb.Command.Env, "GOCACHE"); v != "/home/sandbox/.cache/go-build" {
		t.Errorf("GOCACHE = %q", v)
	}
	if v, _ := envOf(sb.Command.Env, "npm_config_cache"); v != "/home/sandbox/.npm" {
		t.Errorf("npm_config_cache = %q", v)
	}
	// The scope follows the workspace.
	other := cacheHost()
	other.Workspace = "/home/u/other"
	sb2, err := Build(policy.Default(), other, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k := cacheNamed(sb2, "go-build").Key; k == gb.Key || !strings.HasPrefix(k, "ws-other-") {
		t.Errorf("another workspace's scope %q (first %q)", k, gb.Key)
	}
	// Nothing found, or off: no caches.
	none := cacheHost()
	none.Tools = nil
	if sb, _ := Build(policy.Default(), none, nil); len(sb.Caches) != 0 {
		t.Errorf("caches without tools: %+v", sb.Caches)
	}
	p := policy.Default()
	p.Filesystem.DefaultCaches = false
	if sb, _ := Build(p, cacheHost(), nil); len(sb.Caches) != 0 {
		t.Errorf("caches with default_caches = false: %+v", sb.Caches)
	}
	// No cache directory: none, and a warning.
	nodir := cacheHost()
	nodir.CacheRoot = ""
	sb3, _ := Build(policy.Default(), nodir, nil)
	if len(sb3.Caches) != 0 || !slices.ContainsFunc(sb3.Warnings, func(w Warning) bool { return w.Subject == "no-cache-directory" }) {
		t.Errorf("no cache directory: %+v, %+v", sb3.Caches, sb3.Warnings)
	}
}

// A policy's entry changes a built-in cache of its name, or adds one;
// its scope user is shared, its target outside HOME gets a Landlock rule.
func TestBuildPolicyCaches(t *testing.T) {
	p := policy.Default()
	p.Filesystem.Cache = []policy.Cache{
		{Name: "go-mod", Scope: policy.CacheScopeUser, Size: 5 * policy.GiB},
		{Name: "sccache", Target: "/cache/sccache", Env: []string{"SCCACHE_DIR"}},
		{Name: "pip"}, // not found, but asked for
	}
	sb, err := Build(p, cacheHost(), &Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	gm := cacheNamed(sb, "go-mod")
	if gm == nil || gm.Key != "user" || gm.Cap != int64(5*policy.GiB) || gm.Target != "/home/sandbox/go/pkg/mod" || !slices.Equal(gm.Units, []string{"**/?*@v*", "cache/vcs/*"}) {
		t.Errorf("go-mod %+v", gm)
	}
	sc := cacheNamed(sb, "sccache")
	if sc == nil || sc.Cap != int64(policy.DefaultCacheSize) || !strings.HasPrefix(sc.Key, "ws-") {
		t.Fatalf("sccache %+v", sc)
	}
	if v, _ := envOf(sb.Command.Env, "SCCACHE_DIR"); v != "/cache/sccache" {
		t.Errorf("SCCACHE_DIR = %q", v)
	}
	if cacheNamed(sb, "pip") == nil {
		t.Error("an asked-for built-in cache whose tool is not found is left out")
	}
	if !slices.Contains(sb.Landlock.Rules.ReadWrite, "/cache/sccache") || slices.Contains(sb.Landlock.Rules.ReadWrite, "/home/sandbox/.cache/go-build") {
		t.Errorf("Landlock read-write %v", sb.Landlock.Rules.ReadWrite)
	}
	specs := sb.CacheSpecs()
	if len(specs) != len(sb.Caches) || specs[0].Root != "/home/u/.cache/hutch/caches" || specs[0].Dir() != sb.Caches[0].Dir {
		t.Errorf("specs %+v", specs)
	}
	for _, s := range specs {
		if (s.Scope == policy.CacheScopeWorkspace) != (s.Workspace == "/home/u/proj") {
			t.Errorf("spec %s: scope %s workspace %q", s.Name, s.Scope, s.Workspace)
		}
	}
}

// Clashes: a policy's cache nested in a built-in one is refused; a
// built-in one over the workspace (at its host path) is left out, said in
// a warning.
func TestBuildCacheClashes(t *testing.T) {
	p := policy.Default()
	p.Filesystem.Cache = []policy.Cache{{Name: "mine", Target: "/home/sandbox/.cache"}}
	if _, err := Build(p, cacheHost(), nil); err == nil || !strings.Contains(err.Error(), "filesystem.cache[0].target: /home/sandbox/.cache overlaps /home/sandbox/.cache/go-build, the target of the built-in cache go-build (caches may not be nested)") {
		t.Errorf("nested: %v", err)
	}
	// Through a symlink of the root (/var/tmp -> /tmp), over the /dev
	// tmpfs's devices or a synthesized file: refused.
	for target, want := range map[string]string{
		"/var/tmp/x": "its target /var/tmp/x lies in /var/tmp",
		"/run/x":     "its target /run/x lies in /run",
	} {
		p = policy.Default()
		p.Filesystem.Cache = []policy.Cache{{Name: "x", Target: target}}
		if _, err := Build(p, cacheHost(), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cache at %s: %v, want %q", target, err, want)
		}
	}
	p = policy.Default()
	p.Filesystem.WorkspaceAt = policy.WorkspaceAtHost
	h := cacheHost()
	h.Workspace = "/home/sandbox/.npm"
	h.Protection = &mounts.Protection{}
	h.FS = mounts.MemFS{"/usr/bin/sh": {File: true}, "/tmp": {}, "/home/sandbox/.npm/x": {File: true}, "/dev/null": {File: true}}
	sb, err := Build(p, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cacheNamed(sb, "npm") != nil || cacheNamed(sb, "go-build") == nil {
		t.Errorf("caches %+v", sb.Caches)
	}
	if !slices.ContainsFunc(sb.Warnings, func(w Warning) bool { return strings.Contains(w.Message, "the built-in cache npm is left out") }) {
		t.Errorf("warnings %+v", sb.Warnings)
	}
}

// A cache's variable replaces one passed through from the host (which
// names the host's own cache), and gives way to environment.set and --env.
func TestCacheEnvPrecedence(t *testing.T) {
	p := policy.Default()
	p.Environment.Pass = append(p.Environment.Pass, "GO*", "npm_*")
	p.Environment.Set = map[string]string{"npm_config_cache": "/tmp/npm"}
	h := cacheHost()
	h.Env = append(h.Env, "GOCACHE=/home/u/.cache/go-build", "GOMODCACHE=/home/u/go/pkg/mod")
	sb, err := Build(p, h, &Request{Argv: []string{"true"}, ExtraEnv: []string{"GOMODCACHE=/tmp/mod"}})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"GOCACHE": "/home/sandbox/.cache/go-build", "GOMODCACHE": "/tmp/mod", "npm_config_cache": "/tmp/npm"} {
		if v, _ := envOf(sb.Command.Env, k); v != want {
			t.Errorf("%s = %q, want %q", k, v, want)
		}
	}
}
