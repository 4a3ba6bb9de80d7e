package test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stageRequired mirrors seccompprofiles' execStageNeeds (the calls the
// exec stage cannot do without once the filter is loaded); the commands
// below need a few more of their own.
var stageRequired = []string{"prctl", "fcntl", "chdir", "close", "prlimit64", "rt_sigprocmask", "vfork", "execve", "write", "exit_group",
	"openat", "newfstatat", "getdents64", "read", "getpid", "rt_sigtimedwait", "wait4", "kill"}

var shellNeeds = []string{"brk", "mmap", "mprotect", "munmap", "arch_prctl", "set_tid_address", "set_robust_list",
	"rseq", "access", "pread64", "getrandom", "uname", "getuid", "getgid", "geteuid", "getegid", "getppid",
	"getcwd", "fcntl", "ioctl", "futex", "lseek", "statx", "faccessat2", "clone", "exit", "sendmsg"}

func profileAllowing(t *testing.T, dir, name string, names ...string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"defaultAction": "SCMP_ACT_ERRNO",
		"syscalls":      []map[string]any{{"names": names, "action": "SCMP_ACT_ALLOW"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	writeUserFile(t, path, string(b))
	return path
}

// A profile that allows what the exec stage needs (and what the commands
// need) runs commands, reports their end, kills what they leave behind,
// exits by their signal and says why one could not start: the calls it
// denies (close_range, setpgid, dup2, rt_sigaction, clock_nanosleep) have
// fallbacks. A profile that allows only exit_group is refused, naming what
// it lacks; it used to end in exit 125 without a word.
func TestSeccompProfileExecStage(t *testing.T) {
	ws := userDir(t)
	minimal := profileAllowing(t, ws, "minimal.json", append(stageRequired, shellNeeds...)...)
	for _, tc := range []struct {
		argv   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"/bin/sh", "-c", "echo hi"}, 0, "hi\n", ""},
		{[]string{"/bin/sh", "-c", "while :; do :; done & echo started"}, 0, "started\n", ""},
		{[]string{"/bin/sh", "-c", "kill -TERM $$"}, 143, "", ""},
		{[]string{"no-such-command-here"}, 127, "", "hutch: command not found: no-such-command-here"},
	} {
		start := time.Now()
		r := hutch(t, opts{dir: ws}, append([]string{"run", "--no-discover", "--seccomp-profile", minimal, "--"}, tc.argv...)...)
		if r.code != tc.code || r.stdout != tc.stdout || !strings.Contains(r.stderr, tc.stderr) {
			t.Errorf("%q under the minimal profile: exit %d, stdout %q, stderr:\n%s\nwant exit %d, stdout %q, stderr with %q", tc.argv, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%q took %s: the reaper did not end what the command left", tc.argv, d)
		}
	}

	only := profileAllowing(t, ws, "exit-only.json", "exit_group")
	r := hutch(t, opts{dir: ws}, "run", "--no-discover", "--seccomp-profile", only, "--", "true")
	want := "hutch: cannot set up the sandbox: seccomp profile " + only + ": the profile does not allow what hutch's exec stage calls after loading the filter (nsjail/execstage.c); allow these: prctl (become the command's subreaper, so that nothing it leaves behind escapes the end of the command), fcntl (make the status pipe close-on-exec), chdir (change to the command's working directory), close (close hutch's descriptors before the command runs), "
	if r.code != 125 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "execve (run the command)") {
		t.Errorf("exit_group only: exit %d, stderr:\n%s\nwant 125 and:\n%s...", r.code, r.stderr, want)
	}
}
