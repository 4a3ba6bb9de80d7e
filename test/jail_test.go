package test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The command runs as uid 1000 with every capability set empty and
// no_new_privs, leading its own process group in the sandbox's session
// (the init's), which has no controlling terminal.
func TestIdentityAndPrivileges(t *testing.T) {
	ws := userDir(t)
	r := sandboxSh(t, ws, `id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; ps -o sid=,pgid=,pid= -p $$; cat /proc/self/stat | cut -d' ' -f7; grep -E '^(SigIgn|SigBlk):' /proc/self/status`)
	mustCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 9 {
		t.Fatalf("short output:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if lines[0] != "1000" || lines[1] != "1000" {
		t.Errorf("uid/gid inside = %s/%s, want 1000/1000", lines[0], lines[1])
	}
	for _, l := range lines[2:7] {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] != "0000000000000000" {
			t.Errorf("capability set not empty: %q", l)
		}
	}
	if strings.Fields(lines[7])[1] != "1" {
		t.Errorf("NoNewPrivs: %q, want 1", lines[7])
	}
	if f := strings.Fields(lines[8]); len(f) != 3 || f[0] != "1" || f[1] != f[2] {
		t.Errorf("sid pgid pid of the shell: %q; want the init's session (1) and a process group of its own", lines[8])
	}
	if strings.TrimSpace(lines[9]) != "0" {
		t.Errorf("tty_nr = %s, want 0 (no controlling terminal)", lines[9])
	}
	// The init ignores signals; the command must not inherit that.
	if !strings.Contains(r.stdout, "SigBlk:\t0000000000000000") || !strings.Contains(r.stdout, "SigIgn:\t0000000000000000") {
		t.Errorf("the command inherited blocked or ignored signals:\n%s", r.stdout)
	}
}

// rm -rf / inside destroys only the sandbox's writable parts; a host file
// the same user could write, outside the workspace, survives.
func TestRmRfRootLeavesHostUntouched(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "in-workspace"), "x")
	outside := userDir(t)
	canary := filepath.Join(outside, "canary")
	writeUserFile(t, canary, "still here")
	r := sandboxSh(t, ws, `rm -rf --no-preserve-root / 2>/dev/null; rm -rf /* 2>/dev/null; rm -rf /.[!.]* 2>/dev/null; echo done; ls /usr/bin/sh; ls /dev/null /dev/stdout`)
	if !strings.Contains(r.stdout, "done") || !strings.Contains(r.stdout, "/usr/bin/sh") || !strings.Contains(r.stdout, "/dev/stdout") {
		t.Fatalf("rm -rf / run: code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(canary)
	if err != nil || string(b) != "still here" {
		t.Fatalf("host canary damaged: %q, %v", b, err)
	}
	if _, err := os.Stat("/usr/bin/sh"); err != nil {
		t.Fatalf("host /usr/bin/sh: %v", err)
	}
	// The workspace is read-write by design: its content is gone.
	if _, err := os.Stat(filepath.Join(ws, "in-workspace")); !os.IsNotExist(err) {
		t.Errorf("workspace file survived rm -rf / (err %v): is the workspace really read-write?", err)
	}
}

// Host secrets are invisible: /etc/shadow, the user's home, a secret file
// elsewhere on the host, /root, /run, and the host's user database.
func TestHostIsInvisible(t *testing.T) {
	ws := userDir(t)
	home := userDir(t)
	writeUserFile(t, filepath.Join(home, ".ssh", "id_ed25519"), "PRIVATE KEY")
	secretDir := userDir(t)
	secret := filepath.Join(secretDir, "secret.txt")
	writeUserFile(t, secret, "TOPSECRET")
	script := strings.Join([]string{
		`for p in /root ` + home + ` ` + home + `/.ssh/id_ed25519 ` + secret + ` ` + secretDir + ` /run/user /var/run /sys /boot; do`,
		`  if [ -e "$p" ]; then echo "VISIBLE $p"; fi`,
		`done`,
		`cat /etc/passwd`,
		`grep -rs TOPSECRET /etc /tmp /home /workspace /run /var /dev 2>/dev/null | head -1`,
		`echo end`,
	}, "\n")
	r := hutch(t, opts{dir: ws, env: []string{"HOME=" + home}}, "run", "--", "/bin/sh", "-c", script)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "VISIBLE") {
		t.Errorf("host paths visible inside:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "TOPSECRET") {
		t.Errorf("host secret content reachable inside:\n%s", r.stdout)
	}
	host, _ := os.ReadFile("/etc/passwd")
	if strings.Contains(r.stdout, string(host)) {
		t.Errorf("the sandbox sees the host's /etc/passwd")
	}
	if !strings.Contains(r.stdout, "sandbox:x:1000:1000:") {
		t.Errorf("synthesized /etc/passwd lacks the sandbox user:\n%s", r.stdout)
	}
	for _, l := range strings.Split(string(host), "\n") {
		name, _, _ := strings.Cut(l, ":")
		if name != "" && name != "root" && name != "nobody" && strings.Contains(r.stdout, "\n"+name+":") {
			t.Errorf("host user %q appears in the sandbox's /etc/passwd", name)
		}
	}
}

// The tooling tree is read-only; the workspace is read-write and writes
// land on the host; /tmp and HOME are writable scratch.
func TestFilesystemWritability(t *testing.T) {
	ws := userDir(t)
	r := sandboxSh(t, ws, `
touch /usr/hutch-x 2>&1
touch /etc/hutch-x 2>&1
touch /hutch-x 2>&1
echo from-sandbox > /workspace/out.txt && echo ws-ok
echo t > /tmp/t && echo tmp-ok
echo h > $HOME/h && echo home-ok
pwd`)
	mustCode(t, r, 0)
	for _, p := range []string{"/usr/hutch-x", "/etc/hutch-x", "/hutch-x"} {
		if !strings.Contains(r.stdout, "touch: cannot touch '"+p+"': Read-only file system") {
			t.Errorf("write to %s did not fail with EROFS:\n%s", p, r.stdout)
		}
	}
	for _, w := range []string{"ws-ok", "tmp-ok", "home-ok", "/workspace"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("missing %q in output:\n%s", w, r.stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(ws, "out.txt"))
	if err != nil || string(b) != "from-sandbox\n" {
		t.Fatalf("workspace write did not land on the host: %q %v", b, err)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(ws, "out.txt"), &st)
	if int(st.Uid) != testUID {
		t.Errorf("workspace file owned by host uid %d, want the invoking user %d", st.Uid, testUID)
	}
	if _, err := os.Stat("/usr/hutch-x"); err == nil {
		t.Errorf("/usr/hutch-x exists on the host")
	}
}

// The tmpfs mounts hutch makes read-only (the root, with the /bin, /lib
// and /lib64 symlinks every exec follows, and /dev with its /dev/std*
// symlinks) are noatime: on a read-only relatime mount the kernel can never
// record an atime it wants to update, and leaves its lockless path walk
// at each such symlink, every time. The writable scratch mounts keep the
// default (relatime), as on the host.
func TestReadOnlyTmpfsNoatime(t *testing.T) {
	ws := userDir(t)
	// Mount point and options of each tmpfs (the filesystem type is the
	// first field after the "-").
	r := sandboxSh(t, ws, `awk '{for (i = 7; $i != "-"; i++); if ($(i+1) == "tmpfs") print $5, $6}' /proc/self/mountinfo`)
	mustCode(t, r, 0)
	opts := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			opts[f[0]] = f[1]
		}
	}
	has := func(mnt, opt string) bool {
		for _, o := range strings.Split(opts[mnt], ",") {
			if o == opt {
				return true
			}
		}
		return false
	}
	for _, m := range []string{"/", "/dev"} {
		if !has(m, "ro") || !has(m, "noatime") {
			t.Errorf("%s mounted %q, want ro and noatime (all tmpfs mounts: %v)", m, opts[m], opts)
		}
	}
	for _, m := range []string{"/tmp", "/dev/shm"} {
		if !has(m, "rw") || has(m, "noatime") {
			t.Errorf("%s mounted %q, want rw with the default atime mode", m, opts[m])
		}
	}
}

// Protected paths stay read-only inside the workspace, cannot be renamed
// away, and cannot be created when missing; placeholders are removed.
func TestProtectedPaths(t *testing.T) {
	t.Run("existing", func(t *testing.T) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, ".git", "config"), "[core]\n")
		writeUserFile(t, filepath.Join(ws, ".git", "hooks", "pre-commit.sample"), "#!/bin/sh\n")
		writeUserFile(t, filepath.Join(ws, ".git", "HEAD"), "ref: refs/heads/main\n")
		r := sandboxSh(t, ws, `
echo '[core] fsmonitor = evil' >> .git/config 2>/dev/null && echo WROTE-CONFIG
echo evil > .git/hooks/post-checkout 2>/dev/null && echo WROTE-HOOK
rm -f .git/config 2>/dev/null; [ -e .git/config ] || echo REMOVED-CONFIG
mv .git .git-moved 2>/dev/null && echo MOVED-GIT
mv .git/hooks .git/h2 2>/dev/null && echo MOVED-HOOKS
echo ok > .git/HEAD && echo head-ok
echo fine > notes.txt && echo ws-ok`)
		mustCode(t, r, 0)
		for _, bad := range []string{"WROTE-CONFIG", "WROTE-HOOK", "REMOVED-CONFIG", "MOVED-GIT", "MOVED-HOOKS"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("protected path not protected: %s\n%s", bad, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "head-ok") || !strings.Contains(r.stdout, "ws-ok") {
			t.Errorf("ordinary workspace writes failed:\n%s\n%s", r.stdout, r.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
			t.Errorf(".git/config changed on the host: %q", b)
		}
	})
	t.Run("missing", func(t *testing.T) {
		// Nothing is made on the host for a missing path: git works in a
		// new project, and what the command created that host git would
		// execute is reported.
		ws := userDir(t)
		r := sandboxSh(t, ws, `git init -q . && git config core.fsmonitor 'echo evil' && echo GIT-INIT`)
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "GIT-INIT") {
			t.Errorf("git init in a new workspace failed:\n%s%s", r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "hutch: the command created a git repository in .: its configuration and hooks are the sandbox's work") {
			t.Errorf("the created repository was not reported:\n%s", r.stderr)
		}
		clean := userDir(t)
		r = sandboxSh(t, clean, `echo ok`)
		mustCode(t, r, 0)
		if ents, _ := os.ReadDir(clean); len(ents) != 0 || r.stderr != "" {
			t.Errorf("a run in an empty workspace left %v and said %q", ents, r.stderr)
		}
	})
	t.Run("nested", func(t *testing.T) {
		// Every repository in the workspace is protected: a clone inside
		// a project, a worktree whose .git is a file.
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "vendor", "lib", ".git", "config"), "[core]\n")
		writeUserFile(t, filepath.Join(ws, "vendor", "lib", ".git", "hooks", "pre-commit.sample"), "#!/bin/sh\n")
		writeUserFile(t, filepath.Join(ws, "vendor", "lib", ".git", "HEAD"), "ref: refs/heads/main\n")
		writeUserFile(t, filepath.Join(ws, "wt", ".git"), "gitdir: ../vendor/lib/.git/worktrees/wt\n")
		writeUserFile(t, filepath.Join(ws, "vendor", "lib", ".git", "worktrees", "wt", "commondir"), "../..\n")
		r := sandboxSh(t, ws, `
echo '[core] fsmonitor = evil' >> vendor/lib/.git/config 2>/dev/null && echo WROTE-CONFIG
echo evil > vendor/lib/.git/hooks/post-checkout 2>/dev/null && echo WROTE-HOOK
echo 'gitdir: /tmp/evil' > wt/.git 2>/dev/null && echo WROTE-GITFILE
echo ok > vendor/lib/.git/HEAD && echo head-ok`)
		mustCode(t, r, 0)
		for _, bad := range []string{"WROTE-CONFIG", "WROTE-HOOK", "WROTE-GITFILE"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("a nested repository's %s:\n%s", bad, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "head-ok") {
			t.Errorf("ordinary writes in a nested repository failed:\n%s%s", r.stdout, r.stderr)
		}
		// A repository without hooks: the hooks the command makes are
		// reported.
		r = sandboxSh(t, ws, `rm -f vendor/lib/.git/hooks/pre-commit.sample 2>/dev/null; mkdir -p x/.git && echo '[core]' > x/.git/config`)
		mustCode(t, r, 0)
		if !strings.Contains(r.stderr, "created a git repository in x") {
			t.Errorf("a repository made by the command was not reported:\n%s", r.stderr)
		}
	})
	t.Run("symlink-refused", func(t *testing.T) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, ".git", "real-config"), "[core]\n")
		if err := os.Symlink("real-config", filepath.Join(ws, ".git", "config")); err != nil {
			t.Fatal(err)
		}
		r := sandboxSh(t, ws, `echo SHOULD-NOT-RUN`)
		mustCode(t, r, 125)
		if strings.Contains(r.stdout, "SHOULD-NOT-RUN") || !strings.Contains(r.stderr, ".git/config is a symlink") {
			t.Errorf("symlinked protected path not refused clearly:\nstdout %s\nstderr %s", r.stdout, r.stderr)
		}
	})
}

func TestExitStatuses(t *testing.T) {
	ws := userDir(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"zero", []string{"--", "true"}, 0, ""},
		{"three", []string{"--", "/bin/sh", "-c", "exit 3"}, 3, ""},
		{"signal9", []string{"--", "/bin/sh", "-c", "kill -9 $$"}, 128 + 9, ""},
		{"sigterm", []string{"--", "/bin/sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"sigint", []string{"--", "/bin/sh", "-c", "kill -INT $$"}, 128 + 2, ""},
		{"notfound", []string{"--", "no-such-command-hutch"}, 127, "hutch: command not found: no-such-command-hutch (searched PATH inside the sandbox"},
		{"notfound-path", []string{"--", "/nonexistent/cmd"}, 127, "hutch: command not found: /nonexistent/cmd does not exist inside the sandbox"},
		{"cannot-exec", []string{"--", "/etc/hostname"}, 126, "hutch: cannot execute /etc/hostname: execute the command: permission denied"},
		{"timeout", []string{"--timeout", "1s", "--", "sleep", "1000"}, 124, "hutch: timed out after 1s; the command and all its processes were killed"},
		{"bad-flag", []string{"--no-such-flag", "--", "true"}, 125, "flag provided but not defined: --no-such-flag (see hutch run --help)"},
		{"bad-timeout", []string{"--timeout", "soon", "--", "true"}, 125, "--timeout"},
		{"no-command", []string{}, 125, "hutch: no command given"},
		{"bad-workspace", []string{"--workspace", "/nonexistent/ws", "--", "true"}, 125, "workspace /nonexistent/ws"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := hutch(t, opts{dir: ws}, append([]string{"run"}, c.args...)...)
			mustCode(t, r, c.code)
			if c.stderr != "" && !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("stderr lacks %q:\n%s", c.stderr, r.stderr)
			}
			if c.stderr == "" && r.stderr != "" {
				t.Errorf("unexpected stderr: %q", r.stderr)
			}
		})
	}
}

func TestStdinStdoutPassThrough(t *testing.T) {
	ws := userDir(t)
	in := strings.Repeat("line of input\n", 5000)
	r := hutch(t, opts{dir: ws, stdin: strings.NewReader(in)}, "run", "--", "/bin/sh", "-c", "cat; echo to-stderr >&2")
	mustCode(t, r, 0)
	if r.stdout != in {
		t.Errorf("stdin did not come through unchanged: got %d bytes, want %d", len(r.stdout), len(in))
	}
	if r.stderr != "to-stderr\n" {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestEnvironmentScrubbed(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws, env: []string{"HUTCH_CANARY_TOKEN=s3cr3t", "SSH_AUTH_SOCK=/tmp/agent.sock", "AWS_SECRET_ACCESS_KEY=abc", "PASSME=yes", "TZ=UTC"}},
		"run", "--env", "PASSME", "--env", "SETME=1", "--", "env")
	mustCode(t, r, 0)
	for _, leak := range []string{"s3cr3t", "SSH_AUTH_SOCK", "AWS_SECRET", "HUTCH_CANARY"} {
		if strings.Contains(r.stdout, leak) {
			t.Errorf("environment leaks %s:\n%s", leak, r.stdout)
		}
	}
	for _, want := range []string{"PASSME=yes", "SETME=1", "HOME=/home/sandbox", "TZ=UTC", "USER=sandbox"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, r.stdout)
		}
	}
}

// A descriptor the caller leaves open (fd 9, on a host directory) does not
// reach the command: only 0, 1 and 2 are open inside.
func TestInheritedFDNotReachable(t *testing.T) {
	ws := userDir(t)
	hostDir := userDir(t)
	writeUserFile(t, filepath.Join(hostDir, "host-only"), "x")
	f, err := os.Open(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// ExtraFiles[i] becomes fd 3+i: pad to reach fd 9.
	var extra []*os.File
	for i := 3; i < 9; i++ {
		extra = append(extra, f)
	}
	extra = append(extra, f)
	r := hutch(t, opts{dir: ws, extraFiles: extra}, "run", "--", "/bin/sh", "-c",
		`ls /proc/self/fd/9/ 2>&1; ls /proc/$$/fd | tr '\n' ' '; echo; find / -xdev -name host-only 2>/dev/null; true`)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "host-only") {
		t.Fatalf("inherited fd 9 reaches the host directory:\n%s", r.stdout)
	}
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[1]) != "0 1 2" {
		t.Errorf("open fds of the shell = %q, want \"0 1 2\"", lines[1])
	}
}

// The timeout kills the command and everything it started; nothing is left.
func TestTimeoutLeavesNoProcess(t *testing.T) {
	ws := userDir(t)
	m := uniqueMarker(t)
	cmd := hutchCmd(opts{dir: ws}, "run", "--timeout", "1s", "--", "/bin/sh", "-c", "sleep 1000 & setsid sleep 1000 & sleep 1000; : "+m)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var inits []int
	for len(inits) == 0 && time.Since(start) < 10*time.Second {
		inits = initsOf(cmd.Process.Pid)
		time.Sleep(5 * time.Millisecond)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 124 {
		t.Fatalf("exit %v, want 124", err)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("timeout of 1s took %s", el)
	}
	if len(inits) != 1 {
		t.Fatalf("could not find the run's init: %v", inits)
	}
	waitGone(t, m, 2*time.Second)
	if syscall.Kill(inits[0], 0) == nil {
		t.Errorf("the sandbox's init %d is still alive", inits[0])
	}
}

// SIGKILL of the supervisor takes the whole sandbox down.
func TestSupervisorKillLeavesNoProcess(t *testing.T) {
	ws := userDir(t)
	m := uniqueMarker(t)
	cmd := hutchCmd(opts{dir: ws}, "run", "--", "/bin/sh", "-c", "sleep 1000 & sleep 1000; : "+m)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(processesWith(m)) == 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("sandboxed command never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, m, 5*time.Second)
}

// The sandbox has its own hostname, pid namespace and network namespace
// with only loopback.
func TestNamespaces(t *testing.T) {
	ws := userDir(t)
	r := sandboxSh(t, ws, `hostname; ls /proc | grep -cE '^[0-9]+$'; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; cat /sys/class/net 2>&1 | head -1`)
	mustCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if lines[0] != "hutch" {
		t.Errorf("hostname = %q, want hutch", lines[0])
	}
	if n := strings.TrimSpace(lines[1]); n != "4" && n != "3" && n != "5" {
		t.Errorf("%s processes visible in /proc; want only the sandbox's few", n)
	}
	if lines[2] != "lo" || (len(lines) > 3 && !strings.Contains(lines[3], "No such file")) {
		t.Errorf("network interfaces/sysfs inside: %q", lines[2:])
	}
}

// A host that cannot make user namespaces gets exit 125 and the cause and
// fix in words, never an unsandboxed run. user.max_user_namespaces is per
// user namespace, so the test disables it inside one of its own.
func TestNoUserNamespacesFailsClearly(t *testing.T) {
	ws := userDir(t)
	m := uniqueMarker(t)
	cmd := hutchCmd(opts{dir: ws}, "run", "--", "/bin/sh", "-c", "touch "+m)
	cmd.Path = "/usr/bin/unshare"
	cmd.Args = append([]string{"unshare", "--user", "--map-root-user", "/bin/sh", "-c",
		`echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`, hutchBin}, cmd.Args[1:]...)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 125 {
		t.Fatalf("exit %v, want 125; output:\n%s", err, out)
	}
	for _, want := range []string{"user namespaces are disabled", "sudo sysctl -w user.max_user_namespaces="} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, m)); err == nil {
		t.Errorf("the command ran without a sandbox")
	}
}

// Tooling mode rootfs:DIR uses a directory tree as the read-only root
// instead of the host's /usr: here a tiny busybox root.
func TestRootfsTooling(t *testing.T) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is a test dependency (make deps-test installs it): %v", err)
	}
	root := userDir(t)
	writeUserFile(t, filepath.Join(root, "usr", "bin", "busybox"), "")
	if err := os.WriteFile(filepath.Join(root, "usr", "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "usr", "bin", "busybox"), 0o755)
	for _, l := range []string{"sh", "cat", "ls", "id", "touch", "echo"} {
		os.Symlink("busybox", filepath.Join(root, "usr", "bin", l))
	}
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	writeUserFile(t, filepath.Join(root, "etc", "os-release"), "ID=hutch-test-root\n")
	writeUserFile(t, filepath.Join(root, "etc", "passwd"), "root:x:0:0:HOST-ROOTFS-PASSWD:/:/bin/sh\n")
	// The /etc mask and the synthesized files, on a tree that has what
	// this host lacks: keys, and resolv.conf a symlink into /run.
	for _, f := range []string{"shadow", "ssh/ssh_host_ed25519_key", "ssl/private/server.pem"} {
		writeUserFile(t, filepath.Join(root, "etc", f), "ROOTFS-SECRET\n")
	}
	writeUserFile(t, filepath.Join(root, "etc", "ssh", "ssh_config"), "Host *\n")
	os.Symlink("../run/resolvconf/resolv.conf", filepath.Join(root, "etc", "resolv.conf"))
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--tooling", "rootfs:"+root, "--", "/bin/sh", "-c",
		`cat /etc/os-release; grep -c HOST-ROOTFS-PASSWD /etc/passwd; grep -c sandbox /etc/passwd; ls /usr/bin | wc -l; touch /usr/x 2>&1; [ -e /usr/bin/python3 ] && echo HOST-USR-VISIBLE; id -u
cat /etc/shadow /etc/ssh/ssh_host_ed25519_key /etc/ssl/private/server.pem 2>&1; ls /etc/ssl/private; cat /etc/ssh/ssh_config; cat /etc/resolv.conf`)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "ROOTFS-SECRET") {
		t.Errorf("a masked /etc file is readable:\n%s", r.stdout)
	}
	for _, want := range []string{"ID=hutch-test-root", "\n0\n1\n", "Read-only file system", "1000", "Host *\n", "nameserver 127.0.0.1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "HOST-USR-VISIBLE") {
		t.Errorf("host /usr visible in rootfs mode")
	}
}

// hutch policy check names the file, line and key of a bad policy.
func TestPolicyCheckCLI(t *testing.T) {
	dir := userDir(t)
	bad := filepath.Join(dir, "bad.toml")
	writeUserFile(t, bad, "version = 1\n[resources]\nmemory = \"12XB\"\n")
	r := hutch(t, opts{dir: dir}, "policy", "check", bad)
	mustCode(t, r, 1)
	if !strings.Contains(r.stderr, bad+":3: resources.memory: bad size \"12XB\"") {
		t.Errorf("stderr: %s", r.stderr)
	}
	good := filepath.Join(dir, "good.toml")
	writeUserFile(t, good, "version = 1\n[resources]\ntimeout = \"30s\"\n[[network.allow]]\nhost = \"pkgs.example.com\"\nreason = \"package mirror\"\n")
	r = hutch(t, opts{dir: dir}, "policy", "check", good)
	mustCode(t, r, 0)
	r = hutch(t, opts{dir: dir}, "policy", "show", "--policy", good)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, `timeout = "30s"`) || !strings.Contains(r.stdout, `reason = "package mirror"`) {
		t.Errorf("policy show:\n%s", r.stdout)
	}
	r = hutch(t, opts{dir: dir}, "run", "--policy", bad, "--", "true")
	mustCode(t, r, 125)
}

// policy check refuses what run would refuse on this host, not only what
// the file's syntax and keys get wrong.
func TestPolicyCheckAppliesRunsValidation(t *testing.T) {
	dir := userDir(t)
	for name, c := range map[string]struct{ body, want string }{
		"bind":    {"version = 1\n[[filesystem.read_only]]\nsource = \"/nonexistent/data\"\n", "filesystem.read_only[0]: source /nonexistent/data does not exist"},
		"rootfs":  {"version = 1\n[filesystem]\ntooling = \"rootfs:/nonexistent/root\"\n", "tooling rootfs /nonexistent/root"},
		"profile": {"version = 1\n[seccomp]\nprofile = \"/nonexistent/profile.json\"\n", "seccomp profile /nonexistent/profile.json"},
		"strict":  {"version = 1\nenforcement = \"strict\"\n", "strict"},
	} {
		f := filepath.Join(dir, name+".toml")
		writeUserFile(t, f, c.body)
		r := hutch(t, opts{dir: dir}, "policy", "check", f)
		if name == "strict" && r.code == 0 {
			continue // a host where strict enforcement holds
		}
		mustCode(t, r, 1)
		if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "hutch run would refuse it") {
			t.Errorf("%s: stderr %q, want %q", name, r.stderr, c.want)
		}
		if r = hutch(t, opts{dir: dir}, "run", "--policy", f, "--", "true"); r.code != 125 {
			t.Errorf("%s: run exited %d, want 125", name, r.code)
		}
	}
}

// Pseudo file systems and the host's system trees are refused as
// workspaces by rule, even when the policy protects nothing.
func TestSystemTreesRefusedAsWorkspace(t *testing.T) {
	dir := userDir(t)
	pol := filepath.Join(dir, "p.toml")
	writeUserFile(t, pol, "version = 1\n[filesystem]\nprotected = []\n")
	link := filepath.Join(dir, "etc")
	os.Symlink("/etc", link)
	for ws, want := range map[string]string{"/proc": "the host's processes", "/sys": "sysfs", "/dev": "the host's devices", link: "the host's configuration"} {
		r := hutch(t, opts{dir: dir}, "run", "--policy", pol, "-w", ws, "--", "cat", "/proc/1/cmdline")
		mustCode(t, r, 125)
		if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--workspace") {
			t.Errorf("-w %s: %q, want it to say %q and how to fix it", ws, r.stderr, want)
		}
	}
}

// A command gets as many arguments as execve takes (a control message holds
// ~208 KiB: they travel in a memfd), through run and both exec clients.
func TestLargeArgv(t *testing.T) {
	ws := userDir(t)
	arg := strings.Repeat("a", 100<<10)
	args := []string{"--", "/bin/sh", "-c", `echo "$# ${#1}"`, "x"}
	for range 12 {
		args = append(args, arg)
	}
	r := hutch(t, opts{dir: ws}, append([]string{"run"}, args...)...)
	mustCode(t, r, 0)
	if r.stdout != "12 102400\n" {
		t.Errorf("run with 1.2 MB of arguments: %q %s", r.stdout, r.stderr)
	}
	name := startSession(t, ws)
	for _, env := range [][]string{nil, {"HUTCH_NO_FAST_EXEC=1"}} {
		r = hutch(t, opts{dir: ws, env: env}, append([]string{"exec", name}, args...)...)
		mustCode(t, r, 0)
		if r.stdout != "12 102400\n" {
			t.Errorf("exec (%v) with 1.2 MB of arguments: %q %s", env, r.stdout, r.stderr)
		}
	}
}

// Signals hutch receives reach the command; its own status comes back.
func TestSignalForwarding(t *testing.T) {
	ws := userDir(t)
	cmd := hutchCmd(opts{dir: ws}, "run", "--", "/bin/sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; sleep 100 & wait`)
	out := &syncBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("command never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("exit %v, output %q; want the trap to run and exit 7", err, out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A caller that ignores signals (some CI runners ignore real-time signal
// 32, which glibc's signal() cannot even reset) must not pass that on to
// the command.
func TestIgnoredSignalsNotInherited(t *testing.T) {
	dir := userDir(t)
	wrapper := filepath.Join(dir, "ignsig")
	if out, err := exec.Command("gcc", "-static", "-O1", "-o", wrapper, "testdata/ignsig.c").CombinedOutput(); err != nil {
		t.Fatalf("build testdata/ignsig.c: %v\n%s", err, out)
	}
	os.Chmod(wrapper, 0o755)
	cmd := hutchCmd(opts{dir: dir}, "run", "--", "/bin/sh", "-c", "grep SigIgn /proc/self/status")
	cmd.Args = append([]string{wrapper, hutchBin}, cmd.Args[1:]...)
	cmd.Path = wrapper
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SigIgn:\t0000000000000000") {
		t.Errorf("signals ignored by hutch's caller reached the command: %v\n%s", err, out)
	}
}

// The new root is built on a host directory that no bind source contains:
// binding the host's /tmp (where the root is usually staged) must show the
// host's /tmp, not hutch's half-built root.
func TestStageOutsideBindSources(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--ro-bind", os.TempDir()+":/mnt/hosttmp", "--", "/bin/sh", "-c",
		"ls -a /mnt/hosttmp | grep -cx -e .hutchenv -e workspace -e proc; ls -d /mnt/hosttmp/"+filepath.Base(filepath.Dir(ws)))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "0\n") {
		t.Errorf("the bind of the host's %s shows hutch's staging root (or failed): exit %d\n%s\n%s", os.TempDir(), r.code, r.stdout, r.stderr)
	}
}

// The protected-path placeholders go early at teardown (while the init
// dies) only when the init said no sandboxed process was left. A command
// that kills its own reaper leaves processes behind that keep trying to
// create .git/hooks; if the placeholder .git disappeared while they lived,
// the hook could land on the host. The decision is checked in --debug's
// words; the end state (no .git on the host) too, though a wrong decision
// shows there only when the race is lost.
// A workspace without .git is left as it was: nothing is made there to
// protect missing paths, so Go's VCS stamping works, and a SIGKILLed hutch
// leaves nothing behind.
func TestNothingLeftInWorkspace(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	writeUserFile(t, filepath.Join(ws, "main.go"), "package main\n\nfunc main() { println(\"built\") }\n")
	if _, err := exec.LookPath("go"); err == nil {
		r := hutch(t, opts{dir: ws}, "run", "--", "/bin/sh", "-c", "GOCACHE=/tmp/gocache GOFLAGS=-mod=mod go build -o /tmp/m . && /tmp/m")
		mustCode(t, r, 0)
		if !strings.Contains(r.stderr, "built") {
			t.Errorf("go build without .git: %s", r.stderr)
		}
	}
	for i := range 30 {
		cmd := hutchCmd(opts{dir: ws}, "run", "--", "sleep", "10")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%10) * 5 * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
	}
	ents, _ := os.ReadDir(ws)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "go.mod main.go" {
		t.Errorf("after runs and SIGKILLs the workspace holds %v", names)
	}
}

// TestOwnDirsHidden: hutch's own directories (the cache it loads the
// seccomp filter and allowlisted registries from, the security log, the
// session sockets) are not writable, readable or replaceable from a sandbox
// whose workspace contains them (a workspace of $HOME).
func TestOwnDirsHidden(t *testing.T) {
	ws := userDir(t)
	o := opts{dir: ws, env: []string{
		"XDG_CACHE_HOME=" + filepath.Join(ws, ".cache"),
		"XDG_STATE_HOME=" + filepath.Join(ws, ".local", "state"),
		"XDG_RUNTIME_DIR=" + filepath.Join(ws, "run"),
	}}
	rt := filepath.Join(ws, "run")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(rt, testUID, testGID)
	// A first run fills the cache (the compiled seccomp filter).
	mustCode(t, hutch(t, o, "run", "--no-discover", "--", "true"), 0)
	seccompDir := filepath.Join(ws, ".cache", "hutch", "seccomp")
	before := dirDigest(t, seccompDir)
	if before == "" {
		t.Fatalf("no seccomp cache written to %s: the test would prove nothing", seccompDir)
	}
	name := startSessionWith(t, o)

	script := `
mkdir -p .cache/hutch/seccomp 2>/dev/null && echo WROTE .cache/hutch/seccomp
for d in .cache/hutch .local/state/hutch run/hutch; do
  [ -n "$(ls -A $d 2>/dev/null)" ] && echo VISIBLE $d
  touch $d/x 2>/dev/null && echo WROTE $d
  rm -rf $d 2>/dev/null; [ -d $d ] || echo REMOVED $d
done
mv .cache .cache-moved 2>/dev/null && echo MOVED-CACHE
mv .local/state .local/s2 2>/dev/null && echo MOVED-STATE
mv run run2 2>/dev/null && echo MOVED-RUN
echo done`
	bad := []string{"VISIBLE", "WROTE", "REMOVED", "MOVED-"}
	check := func(how string, r result) {
		t.Helper()
		mustCode(t, r, 0)
		for _, b := range bad {
			if strings.Contains(r.stdout, b) {
				t.Errorf("%s: hutch's own directories reachable from the sandbox (%s):\n%s", how, b, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "done") {
			t.Errorf("%s: script did not finish:\n%s\n%s", how, r.stdout, r.stderr)
		}
	}
	check("run", hutch(t, o, "run", "--no-discover", "--", "/bin/sh", "-c", script))
	check("exec", hutch(t, o, "exec", name, "--", "/bin/sh", "-c", script))
	if after := dirDigest(t, seccompDir); after != before {
		t.Errorf("the seccomp cache changed on the host:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := os.Stat(filepath.Join(ws, "run", "hutch", name+".sock")); err != nil {
		t.Errorf("the session's socket is gone from the host: %v", err)
	}
	// The next sandbox still loads the intact filter.
	r := hutch(t, o, "run", "--no-discover", "--", "/bin/sh", "-c", "unshare -Ur true 2>&1 || echo DENIED")
	if !strings.Contains(r.stdout, "DENIED") {
		t.Errorf("seccomp no longer denies unshare after the attack:\n%s\n%s", r.stdout, r.stderr)
	}

	t.Run("workspace-inside-cache", func(t *testing.T) {
		inner := filepath.Join(ws, ".cache", "hutch", "proj")
		if err := os.MkdirAll(inner, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(inner, testUID, testGID)
		r := hutch(t, opts{dir: inner, env: o.env}, "run", "--", "true")
		mustCode(t, r, 125)
		if !strings.Contains(r.stderr, "is inside hutch's own directory") || !strings.Contains(r.stderr, "--workspace") {
			t.Errorf("workspace inside the cache not refused clearly:\n%s", r.stderr)
		}
	})
}

// dirDigest lists the names, sizes and contents' checksums of dir's files.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%d:%x ", e.Name(), len(data), sha256.Sum256(data))
	}
	return b.String()
}

// TestPolicyFileProtected: a policy file (and the seccomp profile it names)
// inside the workspace is read-only inside, for hutch run and for a
// session, so that sandboxed code cannot loosen the next run's policy.
func TestPolicyFileProtected(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "conf", "hutch.toml"), "version = 1\n[network]\nmode = \"none\"\n")
	pol := filepath.Join(ws, "conf", "hutch.toml")
	script := `
echo 'mode = "proxy"' >> conf/hutch.toml 2>/dev/null && echo WROTE
rm -f conf/hutch.toml 2>/dev/null; [ -e conf/hutch.toml ] || echo REMOVED
mv conf conf2 2>/dev/null && echo MOVED-DIR
cat conf/hutch.toml >/dev/null && echo readable
echo x > conf/other && echo other-ok`
	check := func(how string, r result) {
		t.Helper()
		mustCode(t, r, 0)
		for _, bad := range []string{"WROTE", "REMOVED", "MOVED-DIR"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%s: the policy file is not protected (%s):\n%s", how, bad, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "readable") || !strings.Contains(r.stdout, "other-ok") {
			t.Errorf("%s: the policy file should stay readable and its directory writable:\n%s\n%s", how, r.stdout, r.stderr)
		}
	}
	check("run", hutch(t, opts{dir: ws}, "run", "--policy", pol, "--", "/bin/sh", "-c", script))
	name := startSession(t, ws, "--policy", pol)
	check("exec", hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", script))
	if b, _ := os.ReadFile(pol); string(b) != "version = 1\n[network]\nmode = \"none\"\n" {
		t.Errorf("the policy file changed on the host: %q", b)
	}

	// A security log given as a relative path inside the workspace: the
	// sandbox cannot rewrite or remove its own record.
	r := hutch(t, opts{dir: ws}, "run", "--security-log", "sec.log", "--", "/bin/sh", "-c",
		`(: > sec.log) 2>/dev/null && echo TRUNCATED; rm -f sec.log 2>/dev/null; [ -e sec.log ] || echo REMOVED; echo done`)
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "TRUNCATED") || strings.Contains(r.stdout, "REMOVED") || !strings.Contains(r.stdout, "done") {
		t.Errorf("the security log in the workspace is not protected:\n%s\n%s", r.stdout, r.stderr)
	}
}
