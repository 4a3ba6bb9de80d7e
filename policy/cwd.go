package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// InsideCwd turns a working directory given for a command (relative to
// WorkspaceMount, or absolute) into a clean absolute path inside the
// sandbox, "" meaning WorkspaceMount, and refuses one outside
// WorkspaceMount: docs/POLICY.md has the command run in the workspace. The
// check is lexical: inside the sandbox only the workspace is the project,
// and a symlink there cannot lead anywhere the sandbox could not already
// reach. hutch run and exec (--cwd), the Go API (hutch.Session.Exec) and
// the MCP tool's cwd all take it from here.
func InsideCwd(cwd string) (string, error) {
	if strings.ContainsRune(cwd, 0) {
		return "", errors.New("cwd contains a NUL byte")
	}
	p := cwd
	if !path.IsAbs(p) {
		p = path.Join(WorkspaceMount, p)
	}
	p = path.Clean(p)
	if p != WorkspaceMount && !strings.HasPrefix(p, WorkspaceMount+"/") {
		return "", fmt.Errorf("cwd %q resolves to %s, outside %s: commands run in the workspace; pass a directory relative to %s (e.g. \"src\") or an absolute path below it",
			cwd, p, WorkspaceMount, WorkspaceMount)
	}
	return p, nil
}
