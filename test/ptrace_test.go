package test

import (
	"strings"
	"testing"
	"time"
)

// Debuggers: strace and gdb work by default on a command's own processes,
// and still cannot reach hutch's init; with --allow-ptrace=false they are
// denied with a message that says how to allow them.
func TestPtracePolicy(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		o.dir = userDir(t)
		r := hutch(t, o, "run", "--allow-ptrace=false", "--", "strace", "-f", "-o", "/dev/null", "/bin/true")
		if r.code == 0 {
			t.Errorf("strace worked with --allow-ptrace=false:\n%s", r.stderr)
		}
		if !strings.Contains(r.stderr, "hutch: blocked by seccomp policy: ptrace") || !strings.Contains(r.stderr, "pass --allow-ptrace or set seccomp.ptrace = true") {
			t.Errorf("the ptrace denial does not say how to allow it:\n%s", r.stderr)
		}
		r = hutch(t, o, "run", "--", "/bin/sh", "-c", `
strace -f -o /tmp/trace /bin/echo traced && grep -c execve /tmp/trace
gdb -q -batch -ex run --args /bin/true 2>&1 | grep -o 'exited normally'
sleep 30 & s=$!
strace -e trace=none -p $s -o /dev/null 2>/tmp/attach & t=$!
sleep 1; kill $t; wait $t; grep -o 'attached' /tmp/attach
kill $s
strace -p 1 -o /dev/null 2>&1 | grep -o 'Operation not permitted' | head -1`)
		mustCode(t, r, 0)
		for _, want := range []string{"traced\n", "exited normally\n", "attached\n", "Operation not permitted\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("missing %q in:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
			}
		}
		// (gdb's personality(ADDR_NO_RANDOMIZE) stays denied, as under
		// Docker: gdb warns and runs the program with randomization.)
		if strings.Contains(r.stderr, "blocked by seccomp policy: ptrace") || strings.Contains(r.stderr, "blocked by seccomp policy: process_vm") {
			t.Errorf("a tracing call was denied by default:\n%s", r.stderr)
		}
	})
}

// In a session, where ptrace is allowed, a command cannot trace another
// command's processes nor the spawner: each command has a Landlock domain
// of its own, and hutch's processes are not dumpable.
func TestPtraceSessionIsolation(t *testing.T) {
	ws := userDir(t)
	o := opts{dir: ws}
	name := startSessionWith(t, o)
	other := hutchCmd(o, "exec", name, "--", "/bin/sh", "-c", "sleep 31.5")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	var r result
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		r = hutch(t, o, "exec", name, "--", "/bin/sh", "-c", `
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); n=$(cat $p/comm 2>/dev/null)
  case "$c" in "sleep 31.5 ") echo "target ${p#/proc/}";; esac
  case "$n" in hutch:spawner) echo "spawner ${p#/proc/}";; esac
done`)
		if strings.Contains(r.stdout, "target ") {
			break
		}
	}
	pids := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			pids[k] = v
		}
	}
	if pids["target"] == "" || pids["spawner"] == "" {
		t.Fatalf("the other command or the spawner not found inside:\n%s\n%s", r.stdout, r.stderr)
	}
	for what, pid := range pids {
		r := hutch(t, o, "exec", name, "--", "/bin/sh", "-c", "strace -p "+pid+" -o /dev/null 2>&1 | head -1")
		if !strings.Contains(r.stdout, "Operation not permitted") {
			t.Errorf("strace -p of the %s (pid %s): %s%s", what, pid, r.stdout, r.stderr)
		}
	}
	// Its own child it can trace.
	r = hutch(t, o, "exec", name, "--", "strace", "-o", "/dev/null", "/bin/true")
	mustCode(t, r, 0)
}
