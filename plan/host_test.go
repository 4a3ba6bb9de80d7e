package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
