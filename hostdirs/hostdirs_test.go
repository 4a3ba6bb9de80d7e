package hostdirs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirs(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	t.Setenv("XDG_STATE_HOME", "/x/state")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/7")
	t.Setenv("HOME", "/home/u")
	if got := Cache(); got != "/x/cache/hutch" {
		t.Errorf("Cache() = %q", got)
	}
	if got := State(); got != "/x/state/hutch" {
		t.Errorf("State() = %q", got)
	}
	if got := Runtime(); got != "/run/user/7/hutch" {
		t.Errorf("Runtime() = %q", got)
	}
	// Relative XDG values are ignored, as the XDG spec asks.
	t.Setenv("XDG_CACHE_HOME", "rel")
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := Cache(); got != "/home/u/.cache/hutch" {
		t.Errorf("Cache() = %q", got)
	}
	if got := State(); got != "/home/u/.local/state/hutch" {
		t.Errorf("State() = %q", got)
	}
	if got := Runtime(); !strings.HasPrefix(got, os.TempDir()+"/hutch-") {
		t.Errorf("Runtime() = %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/nonexistent")
	if Cache() != "" || State() != "" {
		t.Errorf("nobody's HOME gave Cache %q, State %q", Cache(), State())
	}
	if got := Own(); len(got) != 1 || got[0] != Runtime() {
		t.Errorf("Own() = %q, want only the runtime directory", got)
	}
}

func TestInWorkspace(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "home")
	outside := filepath.Join(root, "elsewhere")
	for _, d := range []string{ws, outside, filepath.Join(ws, "proj")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A link inside the workspace leading out of it, and one outside
	// leading into it.
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "proj"), filepath.Join(root, "in")); err != nil {
		t.Fatal(err)
	}

	rels, err := InWorkspace(ws, []string{
		filepath.Join(ws, ".cache", "hutch"),     // inside, missing: created
		filepath.Join(outside, "state", "hutch"), // outside: left alone
		filepath.Join(ws, "out", "run", "hutch"), // resolves outside
		filepath.Join(root, "in", "rt", "hutch"), // resolves inside
		"",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".cache/hutch", "proj/rt/hutch"}
	if strings.Join(rels, ",") != strings.Join(want, ",") {
		t.Errorf("InWorkspace = %q, want %q", rels, want)
	}
	for _, d := range []string{filepath.Join(ws, ".cache", "hutch"), filepath.Join(ws, "proj", "rt", "hutch")} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s not created as a 0700 directory: %v %v", d, fi, err)
		}
	}
	for _, d := range []string{filepath.Join(outside, "state"), filepath.Join(outside, "run")} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s created, though outside the workspace", d)
		}
	}

	for _, d := range []string{ws, root, filepath.Join(root, "in", "..")} {
		if _, err := InWorkspace(filepath.Join(ws, "proj"), []string{d}); err == nil || !strings.Contains(err.Error(), "is inside hutch's own directory") {
			t.Errorf("workspace inside %s: err = %v", d, err)
		}
	}
}

func TestConfigInWorkspace(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "ws")
	os.MkdirAll(filepath.Join(ws, "conf"), 0o755)
	os.WriteFile(filepath.Join(ws, "conf", "hutch.toml"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "outside.toml"), nil, 0o644)
	os.Symlink(filepath.Join(ws, "conf", "hutch.toml"), filepath.Join(root, "link.toml"))
	rels, err := ConfigInWorkspace(ws, []string{
		filepath.Join(ws, "conf", "hutch.toml"), // inside
		filepath.Join(root, "outside.toml"),     // outside
		filepath.Join(root, "link.toml"),        // a link outside to a file inside
		filepath.Join(ws, "missing.json"),       // skipped
		"",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rels, ","); got != "conf/hutch.toml,conf/hutch.toml" {
		t.Errorf("ConfigInWorkspace = %q", got)
	}
}
