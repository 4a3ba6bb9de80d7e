package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// WorkspacePaths are where the workspace is: on the host, and inside.
type WorkspacePaths struct {
	// Host is the workspace's absolute, symlink-free host path.
	Host string
	// Mount is where it appears inside the sandbox.
	Mount string
}

// PathsFor returns where the workspace at the host path host appears under
// f.WorkspaceAt, or under def where that is empty ("/workspace" when def
// is empty too).
func (f Filesystem) PathsFor(host, def string) WorkspacePaths {
	at := f.WorkspaceAt
	if at == "" {
		at = def
	}
	if at == WorkspaceAtHost {
		return WorkspacePaths{Host: host, Mount: host}
	}
	return WorkspacePaths{Host: host, Mount: WorkspaceMount}
}

// Cwd turns a working directory given for a command into a clean absolute
// path inside the sandbox: relative to the workspace's mount, or absolute
// (at or below the mount, or at or below the workspace's host path, which
// is the same directory), "" meaning the mount. One outside the workspace
// is refused: docs/POLICY.md has the command run in the workspace. The
// check is lexical: inside the sandbox only the workspace is the project,
// and a symlink there cannot lead anywhere the sandbox could not already
// reach. hutch run and exec (--cwd), the Go API (hutch.Session.Exec) and
// the MCP tool's cwd all take it from here.
func (w WorkspacePaths) Cwd(cwd string) (string, error) {
	if strings.ContainsRune(cwd, 0) {
		return "", errors.New("cwd contains a NUL byte")
	}
	mount := w.Mount
	if mount == "" {
		mount = WorkspaceMount
	}
	p := cwd
	if !path.IsAbs(p) {
		p = path.Join(mount, p)
	}
	p = path.Clean(p)
	if w.Host != "" && w.Host != mount {
		if rel, ok := below(p, w.Host); ok {
			p = path.Join(mount, rel)
		}
	}
	if _, ok := below(p, mount); !ok {
		return "", fmt.Errorf("cwd %q resolves to %s, outside %s: commands run in the workspace; pass a directory relative to %s (e.g. \"src\") or an absolute path below it",
			cwd, p, mount, mount)
	}
	return p, nil
}

// HostCwd is the working directory inside that follows the caller's host
// directory dir: the same place in the workspace when dir lies in it, else
// the workspace's mount.
func (w WorkspacePaths) HostCwd(dir string) string {
	mount := w.Mount
	if mount == "" {
		mount = WorkspaceMount
	}
	if w.Host == "" || !path.IsAbs(dir) {
		return mount
	}
	if rel, ok := below(path.Clean(dir), w.Host); ok {
		return path.Join(mount, rel)
	}
	return mount
}

// below reports whether p is dir or lies beneath it, and p relative to dir.
func below(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if dir == "/" {
		return strings.TrimPrefix(p, "/"), true
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rest, true
	}
	return "", false
}
