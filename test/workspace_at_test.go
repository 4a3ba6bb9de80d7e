package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// With --workspace-at host the workspace is at its own host path inside:
// pwd, a virtualenv's shebangs and the protected .git/config all name the
// host's paths; the cwd follows the caller into a subdirectory, and a host
// path given as --cwd means the same directory under either mount.
func TestWorkspaceAtHost(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		sub := filepath.Join(ws, "src", "pkg")
		writeUserFile(t, filepath.Join(sub, "marker"), "m\n")
		if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v\n%s", err, out)
		}
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--workspace-at", "host", "--", "/bin/sh", "-c", `
pwd
python3 -m venv venv >/dev/null && head -1 venv/bin/pip
{ echo x >> .git/config; } 2>&1 | sed 's/.*: //'`)
		mustCode(t, r, 0)
		for _, want := range []string{ws + "\n", "#!" + ws + "/venv/bin/python", "Read-only file system\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("missing %q in:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
			}
		}
		// The venv made inside works on the host.
		if out, err := exec.Command(filepath.Join(ws, "venv", "bin", "python"), "-c", "import sys; print(sys.prefix)").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != filepath.Join(ws, "venv") {
			t.Errorf("the venv does not work on the host: %v %s", err, out)
		}
		// The cwd follows the caller; a host path as --cwd is the same
		// directory under /workspace too.
		o.dir = sub
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--workspace", ws, "--workspace-at", "host"}, sub},
			{[]string{"--workspace", ws}, "/workspace/src/pkg"},
			{[]string{"--workspace", ws, "--cwd", filepath.Join(ws, "src")}, "/workspace/src"},
		} {
			r := hutch(t, o, append(append([]string{"run"}, c.args...), "--", "/bin/sh", "-c", "pwd")...)
			mustCode(t, r, 0)
			if got := strings.SplitN(r.stdout, "\n", 2)[0]; got != c.want {
				t.Errorf("run %v: pwd %q, want %q", c.args, got, c.want)
			}
		}
		// A session's exec follows the caller too (the C fast path).
		o.dir = ws
		name := startSessionWith(t, o)
		o.dir = sub
		if r := hutch(t, o, "exec", name, "--", "pwd"); strings.TrimSpace(r.stdout) != "/workspace/src/pkg" {
			t.Errorf("exec from %s: pwd %q (%s)", sub, r.stdout, r.stderr)
		}
	})
}

// A workspace whose host path leads elsewhere inside is refused with the
// clash named: /var/tmp is a symlink to /tmp in the sandbox.
func TestWorkspaceAtHostRefusals(t *testing.T) {
	d, err := os.MkdirTemp("/var/tmp", "hutch-ws-at-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d)
	os.Chmod(d, 0o755)
	os.Chown(d, testUID, testGID)
	r := hutch(t, opts{dir: d}, "run", "--workspace-at", "host", "--", "true")
	mustCode(t, r, 125)
	if want := `filesystem.workspace_at "host": the workspace at ` + d + `: inside the sandbox that path leads to /tmp/`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	r = hutch(t, opts{dir: d}, "run", "--workspace-at", "elsewhere", "--", "true")
	mustCode(t, r, 125)
	if !strings.Contains(r.stderr, `filesystem.workspace_at: must be "/workspace"`) || !strings.Contains(r.stderr, "--workspace-at") {
		t.Errorf("bad --workspace-at: %q", r.stderr)
	}
}
