package plan

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutchsandbox/hutch/caches"
	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/policy"
)

// buildCaches decides the sandbox's persistent caches: the built-in ones
// whose tools the host has (filesystem.default_caches), then the policy's
// entries, an entry named as a built-in one changing it. A built-in cache
// that would clash with the workspace or a read-only bind is left out,
// with a warning; a policy's entry that clashes is an error.
func buildCaches(p *policy.Policy, h *Host, sb *Sandbox) ([]Cache, error) {
	f := &p.Filesystem
	type entry struct {
		c   Cache
		key string // what errors name: filesystem.cache[i] or the built-in
	}
	var list []entry
	index := map[string]int{}
	if f.DefaultCaches {
		for _, b := range policy.BuiltinCaches {
			var found []string
			for _, t := range b.Tools {
				if where, ok := h.Tools[t]; ok {
					found = append(found, t+" at "+where)
				}
			}
			if len(found) == 0 {
				continue
			}
			index[b.Name] = len(list)
			list = append(list, entry{c: Cache{Name: b.Name, Scope: policy.CacheScopeWorkspace, Target: b.Target(), Cap: int64(b.Size),
				Units: slices.Clone(b.Units), Builtin: true, Why: fmt.Sprintf("%s (built-in; found %s)", b.What, strings.Join(found, ", "))},
				key: "the built-in cache " + b.Name})
		}
	}
	for i, pc := range f.Cache {
		key := fmt.Sprintf("filesystem.cache[%d]", i)
		c := Cache{Name: pc.Name, Scope: pc.CacheScope(), Target: pc.CacheTarget(), Cap: int64(pc.CacheSize()), Why: key}
		if b, ok := policy.LookupBuiltinCache(pc.Name); ok {
			c.Builtin, c.Units = true, slices.Clone(b.Units)
			c.Why = fmt.Sprintf("%s (%s)", b.What, key)
		}
		if j, ok := index[pc.Name]; ok {
			list[j] = entry{c: c, key: key}
			continue
		}
		index[pc.Name] = len(list)
		list = append(list, entry{c: c, key: key})
	}
	if len(list) == 0 {
		return nil, nil
	}
	if h.CacheRoot == "" {
		sb.Warnings = append(sb.Warnings, Warning{Subject: "no-cache-directory",
			Message: "no persistent caches: hutch has no cache directory (neither XDG_CACHE_HOME nor HOME is set), so every run starts with empty caches"})
		return nil, nil
	}
	var out []Cache
	var placed []entry
	for _, e := range list {
		c := e.c
		clash := ""
		if m := sb.Workspace.Mount; policy.Overlaps(c.Target, m) {
			clash = fmt.Sprintf("the workspace, mounted at %s", m)
		}
		for i, b := range f.ReadOnly {
			t := b.Target
			if t == "" {
				t = b.Source
			}
			if clash == "" && policy.Overlaps(c.Target, path.Clean(t)) {
				clash = fmt.Sprintf("%s, the target of filesystem.read_only[%d]", t, i)
			}
		}
		for _, o := range placed {
			if clash == "" && policy.Overlaps(c.Target, o.c.Target) {
				clash = fmt.Sprintf("%s, the target of %s (caches may not be nested)", o.c.Target, o.key)
			}
		}
		if clash != "" {
			if e.key == "the built-in cache "+c.Name {
				sb.Warnings = append(sb.Warnings, Warning{Subject: "cache-clash " + c.Name + " " + c.Target,
					Message: fmt.Sprintf("the built-in cache %s is left out: its target %s overlaps %s (a [[filesystem.cache]] entry named %s with another target brings it back)", c.Name, c.Target, clash, c.Name)})
				continue
			}
			return nil, fmt.Errorf("%s.target: %s overlaps %s; choose another target (or set filesystem.default_caches = false)", e.key, c.Target, clash)
		}
		c.Key = caches.ScopeKey(c.Scope, h.Workspace)
		c.Dir = filepath.Join(h.CacheRoot, c.Key, c.Name)
		c.Env = cacheEnv(c, f.Cache)
		scope := "this workspace's"
		if c.Scope == policy.CacheScopeUser {
			scope = "shared by this user's workspaces"
		}
		c.Why = fmt.Sprintf("cache %s, %s, cap %s: %s", c.Name, scope, cgroup.FormatBytes(c.Cap), c.Why)
		placed = append(placed, e)
		out = append(out, c)
	}
	return out, nil
}

// cacheEnv is the variables pointing c's tool at it: the built-in cache's,
// then those its policy entry names.
func cacheEnv(c Cache, entries []policy.Cache) []string {
	var env []string
	if b, ok := policy.LookupBuiltinCache(c.Name); ok {
		for _, v := range b.Env {
			k, sub, _ := strings.Cut(v, "=")
			env = append(env, k+"="+path.Join(c.Target, sub))
		}
		for _, k := range sortedKeys(b.Set) {
			env = append(env, k+"="+b.Set[k])
		}
	}
	for _, e := range entries {
		if e.Name == c.Name {
			for _, k := range e.Env {
				env = append(env, k+"="+c.Target)
			}
		}
	}
	return env
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CacheSpecs are the caches as package caches keeps them, for Acquire.
func (sb *Sandbox) CacheSpecs() []caches.Spec {
	var out []caches.Spec
	for _, c := range sb.Caches {
		s := caches.Spec{Root: filepath.Dir(filepath.Dir(c.Dir)), Key: c.Key, Name: c.Name, Scope: c.Scope, Target: c.Target, Cap: c.Cap, Units: c.Units}
		if c.Scope == policy.CacheScopeWorkspace {
			s.Workspace = sb.Workspace.Host
		}
		out = append(out, s)
	}
	return out
}
