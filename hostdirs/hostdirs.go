// Package hostdirs names hutch's own per-user directories on the host (its
// cache, its state with the security log, its session sockets) and finds
// those of them that a sandbox's workspace would expose.
//
// hutch trusts what it reads from these directories: the data directory
// holds the image store whose trees become a sandbox's root; the cache holds the
// compiled seccomp filter that the next sandbox loads, the registries that
// the egress proxy allowlists, the mount plan; the state directory holds
// the security log; the runtime directory holds session control sockets.
// A sandbox that could write them could weaken the next sandbox, erase its
// own traces or drive another session. When one of them lies inside the
// workspace (a workspace of $HOME, say), the sandbox gets an empty
// read-only directory in its place (see InWorkspace and mounts.Hide).
package hostdirs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// home is $HOME when it is an absolute path a cache can live under
// (nobody's /nonexistent is not), else "".
func home() string {
	h := os.Getenv("HOME")
	if h == "" || !filepath.IsAbs(h) || h == "/nonexistent" {
		return ""
	}
	return h
}

// Cache is $XDG_CACHE_HOME/hutch, else $HOME/.cache/hutch, else "" (no
// caching).
func Cache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "hutch")
	}
	if h := home(); h != "" {
		return filepath.Join(h, ".cache", "hutch")
	}
	return ""
}

// State is $XDG_STATE_HOME/hutch, else $HOME/.local/state/hutch, else "".
// The security log lives there by default.
func State() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "hutch")
	}
	if h := home(); h != "" {
		return filepath.Join(h, ".local", "state", "hutch")
	}
	return ""
}

// Data is $XDG_DATA_HOME/hutch, else $HOME/.local/share/hutch, else "".
// The image store (package images) lives there.
func Data() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "hutch")
	}
	if h := home(); h != "" {
		return filepath.Join(h, ".local", "share", "hutch")
	}
	return ""
}

// Runtime is the directory of session sockets: $XDG_RUNTIME_DIR/hutch, or
// /tmp/hutch-UID when there is no runtime directory.
func Runtime() string {
	if rt := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(rt) {
		return filepath.Join(rt, "hutch")
	}
	return filepath.Join(os.TempDir(), "hutch-"+strconv.Itoa(os.Getuid()))
}

// Own lists hutch's directories for this user, without the empty ones.
func Own() []string {
	var dirs []string
	for _, d := range []string{Cache(), State(), Data(), Runtime()} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// InWorkspace returns, relative to the workspace ws (a real path, without
// symlinks), those of dirs that lie inside it once symlinks are resolved.
// Each such directory is created first (0700) if missing, so that the
// sandbox cannot create it itself and hutch would later trust what it put
// there. A workspace that is one of dirs, or lies inside one, is refused:
// hiding that would hide the workspace. Directories outside the workspace
// are left alone, and are not created.
func InWorkspace(ws string, dirs []string) ([]string, error) {
	var rels []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("hutch's directory %s: %w", d, err)
		}
		d = abs
		real, err := resolve(d)
		if err != nil {
			return nil, fmt.Errorf("hutch's directory %s: %w", d, err)
		}
		if within(real, ws) {
			return nil, fmt.Errorf("workspace %s is inside hutch's own directory %s, which sandboxed code must not write (it holds hutch's cache, security log or session sockets); pass a project directory with --workspace", ws, d)
		}
		if !within(ws, real) {
			continue
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("hutch's directory %s inside the workspace: create it to hide it: %w", d, err)
		}
		// Again, now that it exists: the sandbox did not run yet, but a
		// symlink may have been on the way.
		if real, err = filepath.EvalSymlinks(d); err != nil {
			return nil, fmt.Errorf("hutch's directory %s: %w", d, err)
		}
		if rel, ok := beneath(ws, real); ok {
			rels = append(rels, rel)
		}
	}
	return rels, nil
}

// ConfigInWorkspace returns, relative to the workspace ws (a real path),
// those of files (hutch's configuration: the policy file, a seccomp profile
// it names; a security log given with --security-log) that lie inside it
// once symlinks are resolved. Missing files and "" are skipped. hutch reads
// these files again on the next run or writes them during this one, so a
// sandbox must not be able to change them.
func ConfigInWorkspace(ws string, files []string) ([]string, error) {
	var rels []string
	for _, f := range files {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("configuration file %s: %w", f, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("configuration file %s: %w", f, err)
		}
		if rel, ok := beneath(ws, real); ok {
			rels = append(rels, rel)
		}
	}
	return rels, nil
}

// beneath returns path relative to root when it lies strictly beneath it
// (both clean and absolute).
func beneath(root, path string) (string, bool) {
	if path == root || !within(root, path) {
		return "", false
	}
	if root == "/" {
		return path[1:], true
	}
	return path[len(root)+1:], true
}

// within reports whether path is root or lies beneath it (both clean and
// absolute).
func within(root, path string) bool {
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}

// resolve returns path with symlinks resolved as far as it exists; the
// missing rest is appended as it is.
func resolve(path string) (string, error) {
	path = filepath.Clean(path)
	var rest []string
	for p := path; ; p = filepath.Dir(p) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || p == "/" || p == "." {
			return "", err
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}
