package policy

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// Cache scopes: which sandboxes share a cache (filesystem.cache[].scope).
const (
	// CacheScopeWorkspace gives each workspace (by its real host path) a
	// cache of its own: one project's sandbox cannot poison another's.
	CacheScopeWorkspace = "workspace"
	// CacheScopeUser shares the cache between every sandbox of this user
	// that names it.
	CacheScopeUser = "user"
)

// DefaultCacheSize caps a cache of the policy's that names no size and
// is not a built-in one.
const DefaultCacheSize = 1 * GiB

// MinCacheSize is the smallest cap a cache may have.
const MinCacheSize = 1 * MiB

// MaxCacheName is the longest cache name.
const MaxCacheName = 64

// BuiltinCache is one of the caches hutch knows for a toolchain: where the
// tool keeps it in a home directory, the variables that point the tool at
// it, and which executables in the tooling tree turn it on.
type BuiltinCache struct {
	// Name is the cache's name (filesystem.cache[].name).
	Name string
	// What says what it holds, for hutch plan and docs/CACHES.md.
	What string
	// Home is the target, relative to SandboxHome.
	Home string
	// Env are variables set to the target ("NAME"), or to a directory
	// beneath it ("NAME=sub").
	Env []string
	// Set are variables set to a fixed value while the cache is on.
	Set map[string]string
	// Tools are executables whose presence in the tooling tree (in the
	// command's PATH, or a well-known toolchain directory) turns the
	// cache on.
	Tools []string
	// Size is the cache's cap.
	Size Size
	// Units are patterns, relative to the cache's root, of directories
	// pruned whole rather than file by file (an unpacked module, a git
	// repository): removing part of one would leave the tool a broken
	// entry that it trusts. "*" matches within one path element, "**"
	// any number of them (see MatchUnit).
	Units []string
}

// Target is the cache's path inside.
func (b BuiltinCache) Target() string { return path.Join(SandboxHome, b.Home) }

// BuiltinCaches are the caches filesystem.default_caches turns on, each
// when one of its tools is found.
var BuiltinCaches = []BuiltinCache{
	{Name: "go-build", What: "Go build cache", Home: ".cache/go-build", Env: []string{"GOCACHE"}, Tools: []string{"go"}, Size: 2 * GiB},
	// Extracted modules (path@version) are read-only trees; the
	// downloads beneath cache/download are single files.
	{Name: "go-mod", What: "Go module cache", Home: "go/pkg/mod", Env: []string{"GOMODCACHE"}, Tools: []string{"go"}, Size: 2 * GiB,
		Units: []string{"**/?*@v*", "cache/vcs/*"}},
	// _npx holds one installation per npx package set.
	{Name: "npm", What: "npm cache (and npx's installs)", Home: ".npm", Env: []string{"npm_config_cache"}, Tools: []string{"npm", "npx"}, Size: 1 * GiB,
		Units: []string{"_npx/*"}},
	// Yarn 1 unpacks each package into a directory of its own; Yarn 2+
	// keeps its global cache beneath the global folder.
	{Name: "yarn", What: "Yarn cache", Home: ".cache/yarn", Env: []string{"YARN_CACHE_FOLDER", "YARN_GLOBAL_FOLDER=berry"}, Tools: []string{"yarn", "yarnpkg"}, Size: 1 * GiB,
		Units: []string{"v*/*"}},
	{Name: "pnpm", What: "pnpm content-addressable store", Home: ".local/share/pnpm/store", Env: []string{"npm_config_store_dir"}, Tools: []string{"pnpm"}, Size: 2 * GiB},
	{Name: "pip", What: "pip cache (HTTP responses and built wheels)", Home: ".cache/pip", Env: []string{"PIP_CACHE_DIR"}, Tools: []string{"pip", "pip3"}, Size: 1 * GiB},
	// The cache is another file system than a virtualenv in the
	// workspace: uv copies, and says nothing about it.
	{Name: "uv", What: "uv cache", Home: ".cache/uv", Env: []string{"UV_CACHE_DIR"}, Set: map[string]string{"UV_LINK_MODE": "copy"}, Tools: []string{"uv"}, Size: 2 * GiB,
		Units: []string{"archive-v*/*", "sdists-v*/*/*", "git-v*/*/*"}},
	// Not CARGO_HOME, which also holds installed binaries and cargo's
	// configuration: only its registry and git caches persist.
	{Name: "cargo-registry", What: "Cargo registry index and crates", Home: ".cargo/registry", Tools: []string{"cargo"}, Size: 1 * GiB,
		Units: []string{"src/*/*", "index/*"}},
	{Name: "cargo-git", What: "Cargo git dependencies", Home: ".cargo/git", Tools: []string{"cargo"}, Size: 1 * GiB,
		Units: []string{"db/*", "checkouts/*/*"}},
	{Name: "maven", What: "Maven local repository", Home: ".m2/repository", Tools: []string{"mvn"}, Size: 2 * GiB},
	{Name: "gradle", What: "Gradle caches (GRADLE_USER_HOME/caches)", Home: ".gradle/caches", Tools: []string{"gradle"}, Size: 2 * GiB,
		Units: []string{"transforms-*/*", "*/transforms/*"}},
	{Name: "ccache", What: "ccache", Home: ".cache/ccache", Env: []string{"CCACHE_DIR"}, Tools: []string{"ccache"}, Size: 1 * GiB},
}

// ToolchainDirs are where toolchains live outside PATH that the
// built-in caches look for their tools in, besides the command's PATH.
var ToolchainDirs = []string{"/usr/local/go/bin", "/usr/lib/go/bin"}

// LookupBuiltinCache returns the built-in cache named name.
func LookupBuiltinCache(name string) (BuiltinCache, bool) {
	for _, b := range BuiltinCaches {
		if b.Name == name {
			return b, true
		}
	}
	return BuiltinCache{}, false
}

// MatchUnit reports whether rel, a directory's slash-separated path
// relative to a cache's root, matches pattern: its elements are matched by
// path.Match, and an element "**" matches any number of elements (none
// included).
func MatchUnit(pattern, rel string) bool {
	return matchParts(strings.Split(pattern, "/"), strings.Split(rel, "/"))
}

func matchParts(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchParts(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], name[0]); err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// validCacheName reports whether s can name a cache: it names a directory
// of hutch's, beside its lock and record files (which have a '.').
func validCacheName(s string) bool {
	if s == "" || len(s) > MaxCacheName || s[0] == '-' || s[0] == '_' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CacheTarget is the target of c: its own, or its built-in's.
func (c Cache) CacheTarget() string {
	if c.Target != "" {
		return c.Target
	}
	if b, ok := LookupBuiltinCache(c.Name); ok {
		return b.Target()
	}
	return ""
}

// cacheTargetReserved says why a cache may not be bound at target (clean,
// absolute), or "".
func cacheTargetReserved(target string) string {
	if target == "/" {
		return "the root is hutch's"
	}
	for _, dir := range []string{"/proc", "/dev", "/sys", "/etc", WorkspaceMount, "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"} {
		if target == dir || strings.HasPrefix(target, dir+"/") {
			return dir + " and everything beneath it are hutch's or the tooling tree's (read-only)"
		}
	}
	for _, dir := range []string{"/tmp", SandboxHome} {
		if target == dir || strings.HasPrefix(dir, target+"/") {
			return dir + " is a tmpfs of its own (a cache beneath it is fine, e.g. " + SandboxHome + "/.cache/NAME)"
		}
	}
	if target == "/run" || target == "/var" || target == "/var/tmp" {
		return target + " is hutch's (a cache beneath it is fine)"
	}
	return ""
}

// Overlaps reports whether one of two clean absolute paths is the other or
// lies beneath it.
func Overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

func (v *validator) caches(f *Filesystem) {
	seen := map[string]int{}
	type placed struct {
		key, target string
	}
	var targets []placed
	for i := range f.Cache {
		c := &f.Cache[i]
		key := fmt.Sprintf("filesystem.cache[%d]", i)
		_, builtin := LookupBuiltinCache(c.Name)
		switch {
		case c.Name == "":
			v.bad(key+".name", "required: name the cache (lower-case letters, digits, '-' and '_'), e.g. %q", "sccache")
		case !validCacheName(c.Name):
			v.bad(key+".name", "%q is not a cache name: want 1 to %d lower-case letters, digits, '-' and '_', starting with a letter or digit", c.Name, MaxCacheName)
		default:
			if j, dup := seen[c.Name]; dup {
				v.bad(key+".name", "%q is named twice (filesystem.cache[%d] has it too)", c.Name, j)
			} else {
				seen[c.Name] = i
			}
		}
		switch c.Scope {
		case "", CacheScopeWorkspace, CacheScopeUser:
		default:
			v.bad(key+".scope", "unknown scope %q: want %q (the default: one cache per workspace) or %q (shared by every workspace of this user)", c.Scope, CacheScopeWorkspace, CacheScopeUser)
		}
		target := c.Target
		switch {
		case target == "" && builtin:
			target = c.CacheTarget()
		case target == "":
			v.bad(key+".target", "required: the absolute path inside where the cache is mounted, e.g. %q (only the built-in caches %s have a default target)", SandboxHome+"/.cache/"+nameOr(c.Name, "NAME"), builtinNames())
		case !filepath.IsAbs(target):
			v.bad(key+".target", "must be an absolute path inside the sandbox, such as %q, not %q", path.Join(SandboxHome, target), target)
			target = ""
		case path.Clean(target) != target:
			v.bad(key+".target", "%q is not clean: write %q", target, path.Clean(target))
			target = ""
		default:
			if why := cacheTargetReserved(target); why != "" {
				v.bad(key+".target", "cannot mount a cache at %s: %s", target, why)
				target = ""
			}
		}
		if target != "" {
			for _, o := range targets {
				if Overlaps(o.target, target) {
					v.bad(key+".target", "%s overlaps %s, the target of %s: caches may not be nested", target, o.target, o.key)
				}
			}
			for j, b := range f.ReadOnly {
				t := b.Target
				if t == "" {
					t = b.Source
				}
				if filepath.IsAbs(t) && Overlaps(path.Clean(t), target) {
					v.bad(key+".target", "%s overlaps %s, the target of filesystem.read_only[%d]", target, t, j)
				}
			}
			targets = append(targets, placed{key, target})
		}
		if c.Size != 0 && c.Size < MinCacheSize {
			v.bad(key+".size", "must be at least %s (or 0 for the default), not %s", MinCacheSize, c.Size)
		}
		for j, name := range c.Env {
			ekey := fmt.Sprintf("%s.env[%d]", key, j)
			if !validEnvName(name) {
				v.bad(ekey, "%q is not a variable name: want letters, digits and underscores, not starting with a digit", name)
			} else if value, fixed := fixedEnv[name]; fixed {
				v.bad(ekey, "hutch sets %s itself (to %s)", name, value)
			}
		}
	}
}

func nameOr(s, dflt string) string {
	if validCacheName(s) {
		return s
	}
	return dflt
}

func builtinNames() string {
	var names []string
	for _, b := range BuiltinCaches {
		names = append(names, b.Name)
	}
	return strings.Join(names, ", ")
}

// CacheScope is c's scope, CacheScopeWorkspace when it names none.
func (c Cache) CacheScope() string {
	if c.Scope == "" {
		return CacheScopeWorkspace
	}
	return c.Scope
}

// CacheSize is c's cap: its own, its built-in's, or DefaultCacheSize.
func (c Cache) CacheSize() Size {
	if c.Size > 0 {
		return c.Size
	}
	if b, ok := LookupBuiltinCache(c.Name); ok {
		return b.Size
	}
	return DefaultCacheSize
}
