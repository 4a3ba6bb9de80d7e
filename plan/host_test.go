package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/policy"
)

// Pseudo file systems, device trees and the host's system directories are
// refused as workspaces by rule, whatever protection the policy asks for,
// in words that say why; a symlink is judged by what it points to.
func TestResolveWorkspaceRefusesSystemTrees(t *testing.T) {
	link := filepath.Join(t.TempDir(), "etc-link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{
		"/proc":               "the host's processes",
		"/proc/self":          "the host's processes",
		"/sys/kernel":         "the host's kernel and devices",
		"/dev":                "the host's devices",
		"/dev/shm":            "the host's devices",
		"/etc":                "the host's configuration",
		link:                  "the host's configuration",
		"/usr":                "a top-level system directory",
		"/":                   "whole host root",
		"/run":                "runtime state",
		"/sys/fs/cgroup/pids": "",
	} {
		_, err := ResolveWorkspace(dir)
		if _, statErr := os.Stat(dir); statErr != nil {
			continue // not on this host
		}
		if err == nil {
			t.Errorf("workspace %s accepted", dir)
			continue
		}
		if want != "" && !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--workspace") {
			t.Errorf("workspace %s: %v, want it to say %q and how to fix it", dir, err, want)
		}
	}
	for _, ok := range []string{t.TempDir(), "/tmp"} {
		if _, err := ResolveWorkspace(ok); err != nil {
			t.Errorf("workspace %s refused: %v", ok, err)
		}
	}
}

// The built-in caches of a sandbox on an image are those of the image's
// tools, found on the image's PATH beneath its root, not the host's.
func TestFindToolsInImage(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "opt/node/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "opt/node/bin/npm"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.Filesystem.Tooling = policy.ToolingImage + "example.test/node:1"
	got := FindTools(p, []string{"PATH=/usr/local/go/bin:/usr/bin:/bin"}, &ImageFacts{Root: root, Env: []string{"PATH=/opt/node/bin:/usr/bin"}}, nil)
	if got["npm"] != "/opt/node/bin/npm" {
		t.Errorf("FindTools in an image with /opt/node/bin/npm on its PATH: npm = %q, want /opt/node/bin/npm (all: %v)", got["npm"], got)
	}
	for _, tool := range []string{"go", "pip", "mvn"} {
		if where, ok := got[tool]; ok {
			t.Errorf("FindTools in an image without %s found the host's at %s", tool, where)
		}
	}
}

// In an image whose root is its layers (never on the host as one tree),
// the tools are found through the merged layers, an absolute symlink
// resolved inside the image: /usr/bin/go -> /usr/lib/go/bin/go with the
// link in one layer and the program in another.
func TestFindToolsInLayers(t *testing.T) {
	d := t.TempDir()
	for _, p := range []string{"top/usr/bin", "low/usr/lib/go/bin"} {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "low/usr/lib/go/bin/go"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/go/bin/go", filepath.Join(d, "top/usr/bin/go")); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.Filesystem.Tooling = policy.ToolingImage + "example.test/go:1"
	img := &ImageFacts{Root: filepath.Join(d, "merged"), Env: []string{"PATH=/usr/bin"},
		Layers: []string{filepath.Join(d, "top"), filepath.Join(d, "low")}}
	if got := FindTools(p, nil, img, nil); got["go"] != "/usr/bin/go" {
		t.Errorf("FindTools in layers with /usr/bin/go -> /usr/lib/go/bin/go: go = %q, want /usr/bin/go (all: %v)", got["go"], got)
	}
}
