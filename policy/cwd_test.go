package policy

import "testing"

func TestWorkspaceCwd(t *testing.T) {
	fixed := WorkspacePaths{Host: "/home/u/proj", Mount: "/workspace"}
	for in, want := range map[string]string{
		"": "/workspace", ".": "/workspace", "src": "/workspace/src", "src/../lib/": "/workspace/lib",
		"/workspace": "/workspace", "/workspace/a/b": "/workspace/a/b", "/workspace/./a//b/": "/workspace/a/b",
		// A host path in the workspace is the same directory.
		"/home/u/proj": "/workspace", "/home/u/proj/src/": "/workspace/src",
	} {
		if got, err := fixed.Cwd(in); err != nil || got != want {
			t.Errorf("Cwd(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"../..":             `cwd "../.." resolves to /, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/etc":              `cwd "/etc" resolves to /etc, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/workspace2":       `cwd "/workspace2" resolves to /workspace2, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/workspace/../tmp": `cwd "/workspace/../tmp" resolves to /tmp, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"/home/u/project":   `cwd "/home/u/project" resolves to /home/u/project, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`,
		"a\x00b":            "cwd contains a NUL byte",
	} {
		if _, err := fixed.Cwd(in); err == nil || err.Error() != want {
			t.Errorf("Cwd(%q) error = %v; want %s", in, err, want)
		}
	}
	host := Filesystem{WorkspaceAt: WorkspaceAtHost}.PathsFor("/home/u/proj", "")
	for in, want := range map[string]string{"": "/home/u/proj", "src": "/home/u/proj/src", "/home/u/proj/a": "/home/u/proj/a"} {
		if got, err := host.Cwd(in); err != nil || got != want {
			t.Errorf("host: Cwd(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := host.Cwd("/workspace"); err == nil {
		t.Error("host: /workspace accepted")
	}
}

func TestPathsFor(t *testing.T) {
	for _, c := range []struct{ at, def, want string }{
		{"", "", "/workspace"}, {"", "host", "/srv/p"}, {"/workspace", "host", "/workspace"}, {"host", "", "/srv/p"},
	} {
		if got := (Filesystem{WorkspaceAt: c.at}).PathsFor("/srv/p", c.def).Mount; got != c.want {
			t.Errorf("at %q default %q: mount %q, want %q", c.at, c.def, got, c.want)
		}
	}
}

func TestHostCwd(t *testing.T) {
	w := WorkspacePaths{Host: "/home/u/proj", Mount: "/workspace"}
	for dir, want := range map[string]string{
		"/home/u/proj": "/workspace", "/home/u/proj/a/b": "/workspace/a/b", "/home/u": "/workspace", "/home/u/project": "/workspace", "rel": "/workspace",
	} {
		if got := w.HostCwd(dir); got != want {
			t.Errorf("HostCwd(%q) = %q, want %q", dir, got, want)
		}
	}
}
