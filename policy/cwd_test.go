package policy

import "testing"

func TestInsideCwd(t *testing.T) {
	for in, want := range map[string]string{
		"": "/workspace", ".": "/workspace", "src": "/workspace/src", "src/../lib/": "/workspace/lib",
		"/workspace": "/workspace", "/workspace/a/b": "/workspace/a/b", "/workspace/./a//b/": "/workspace/a/b",
	} {
		if got, err := InsideCwd(in); err != nil || got != want {
			t.Errorf("InsideCwd(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"../..":             `cwd "../.." resolves to /, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/etc":              `cwd "/etc" resolves to /etc, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/workspace2":       `cwd "/workspace2" resolves to /workspace2, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/workspace/../tmp": `cwd "/workspace/../tmp" resolves to /tmp, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"a\x00b":            "cwd contains a NUL byte",
	} {
		if _, err := InsideCwd(in); err == nil || err.Error() != want {
			t.Errorf("InsideCwd(%q) error = %v; want %s", in, err, want)
		}
	}
}
