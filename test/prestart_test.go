package test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
)

// subreaperEnv turns the test binary into a child subreaper that runs one
// hutch command and then reports every process that was orphaned to it:
// whatever hutch started and did not reap itself (a prestarted init it
// forgot, a sandbox it left) is re-parented to the nearest subreaper.
const subreaperEnv = "HUTCH_E2E_SUBREAPER"

// orphanMarker starts the helper's report line on stderr.
const orphanMarker = "hutch-e2e-orphans:"

// subreaperMain is the helper: argv is the hutch command line to run.
func subreaperMain(argv []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		return 99
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if uid, _ := strconv.Atoi(os.Getenv("HUTCH_E2E_UID")); uid != os.Getuid() {
		gid, _ := strconv.Atoi(os.Getenv("HUTCH_E2E_GID"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}
	}
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			fmt.Fprintln(os.Stderr, "subreaper:", err)
			return 99
		}
		code = ee.ExitCode()
	}
	// Orphans re-parent as their parent exits; give a dying init time to
	// arrive, then count every child, alive or zombie.
	time.Sleep(300 * time.Millisecond)
	var orphans []string
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		if err != nil || pid == 0 {
			break
		}
		orphans = append(orphans, fmt.Sprintf("%d (reaped)", pid))
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if f := strings.Fields(s[i+1:]); i > 0 && len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			orphans = append(orphans, fmt.Sprintf("%s %q", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	fmt.Fprintf(os.Stderr, "%s %d %v\n", orphanMarker, len(orphans), orphans)
	return code
}

// hutchReaped runs hutch under the subreaper helper and fails the test if
// anything was left orphaned.
func hutchReaped(t *testing.T, o opts, args ...string) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.env = append(o.env, subreaperEnv+"=1", fmt.Sprintf("HUTCH_E2E_UID=%d", testUID), fmt.Sprintf("HUTCH_E2E_GID=%d", testGID))
	// The helper itself runs as the test process's user (it sets the
	// credentials of hutch), from a copy the test user need not read.
	helper := exec.Command(self, append([]string{hutchBin}, args...)...)
	base := hutchCmd(o)
	helper.Dir, helper.Env, helper.Stdin = base.Dir, base.Env, base.Stdin
	var out, errb bytes.Buffer
	helper.Stdout, helper.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := helper.Start(); err != nil {
		t.Fatalf("start the subreaper helper: %v", err)
	}
	go func() { done <- helper.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		helper.Process.Kill()
		<-done
		t.Fatalf("hutch %v did not finish within 60s; stderr so far:\n%s", args, errb.String())
	}
	r := result{stdout: out.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("hutch %v: %v", args, err)
		}
		r.code = ee.ExitCode()
	}
	stderr := errb.String()
	i := strings.LastIndex(stderr, orphanMarker)
	if i < 0 {
		t.Fatalf("hutch %v: the subreaper helper gave no report:\n%s", args, stderr)
	}
	report := strings.TrimSpace(stderr[i+len(orphanMarker):])
	r.stderr = stderr[:i]
	if !strings.HasPrefix(report, "0 ") {
		t.Fatalf("hutch %v left processes behind (re-parented to the subreaper): %s\nexit %d, stderr:\n%s", args, report, r.code, r.stderr)
	}
	return r
}

// The init of `hutch run` is started by a C constructor before the Go
// runtime (nsjail/prestart). It must be adopted on success, and ended and
// reaped by hutch itself on every other path: nothing may be left to
// whoever reaps hutch's orphans.
func TestPrestartedInit(t *testing.T) {
	ws := userDir(t)
	t.Run("adopted", func(t *testing.T) {
		r := hutchReaped(t, opts{dir: ws}, "run", "--debug", "--", "/bin/sh", "-c", "echo ok")
		mustCode(t, r, 0)
		if r.stdout != "ok\n" {
			t.Fatalf("stdout %q", r.stdout)
		}
		if !strings.Contains(r.stderr, "prestarted before the Go runtime, adopted") {
			t.Fatalf("the sandbox did not use the prestarted init; stderr:\n%s", r.stderr)
		}
	})
	t.Run("turned-off", func(t *testing.T) {
		r := hutchReaped(t, opts{dir: ws, env: []string{"HUTCH_NO_PRESTART=1"}}, "run", "--debug", "--", "/bin/true")
		mustCode(t, r, 0)
		if strings.Contains(r.stderr, "prestarted") {
			t.Fatalf("HUTCH_NO_PRESTART=1 still prestarted; stderr:\n%s", r.stderr)
		}
	})
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad-policy-file", []string{"run", "--policy", "/nonexistent/hutch-policy.toml", "--", "true"}, 125, "/nonexistent/hutch-policy.toml"},
		{"bad-flag-value", []string{"run", "--net", "bogus", "--", "true"}, 125, "--net"},
		{"unknown-flag", []string{"run", "--no-such-flag", "--", "true"}, 125, "no-such-flag"},
		{"command-not-found", []string{"run", "--", "/nonexistent-command"}, 127, "/nonexistent-command"},
		{"help", []string{"run", "--help"}, 0, "COMMAND"},
		{"json", []string{"run", "--json", "--", "true"}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := hutchReaped(t, opts{dir: ws}, c.args...)
			mustCode(t, r, c.code)
			if !strings.Contains(r.stderr+r.stdout, c.want) {
				t.Fatalf("output does not mention %q:\nstdout:\n%s\nstderr:\n%s", c.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestPlanHint: the second `hutch run` of a command line in a directory
// builds its root from the plan hint the first one stored, and the root is
// the same as without a hint; a hint of another plan, or garbage, is not
// used and leaves no trace in the sandbox.
func TestPlanHint(t *testing.T) {
	ws := userDir(t)
	cache := userDir(t)
	o := opts{dir: ws, env: []string{"XDG_CACHE_HOME=" + cache}}
	// Mount points, filesystem types and options of the sandbox's root,
	// with the kernel's mount ids left out.
	script := `awk '{print $5, $6, $9, $10}' /proc/self/mountinfo | sed 's/size=[0-9]*k,//'`
	run := func(env ...string) (string, result) {
		t.Helper()
		oo := o
		oo.env = append(append([]string{}, o.env...), env...)
		r := hutchReaped(t, oo, "run", "--debug", "--no-discover", "--", "/bin/sh", "-c", script)
		mustCode(t, r, 0)
		i := strings.Index(r.stderr, `msg="plan hint"`)
		if i < 0 {
			return "(no record)", r
		}
		line := r.stderr[i:]
		line = line[:strings.IndexByte(line+"\n", '\n')]
		state := line[strings.Index(line, "state=")+len("state="):]
		return strings.Trim(state, `"`), r
	}
	if st, _ := run(); st != "" {
		t.Errorf("first run: hint state %q, want none", st)
	}
	hints, _ := filepath.Glob(filepath.Join(cache, "hutch", "plans", "*"))
	if len(hints) != 1 {
		t.Fatalf("plan hints stored: %v, want one", hints)
	}
	st, hinted := run()
	if st != "used" {
		t.Fatalf("second run: hint state %q, want used\n%s", st, hinted.stderr)
	}
	if !strings.Contains(hinted.stdout, "/workspace ") || !strings.Contains(hinted.stdout, "/usr ro") {
		t.Errorf("the hinted root lacks the workspace or a read-only /usr:\n%s", hinted.stdout)
	}
	st, plain := run("HUTCH_NO_PLAN_HINT=1")
	if st != "(no record)" {
		t.Errorf("HUTCH_NO_PLAN_HINT=1: hint state %q, want no hint at all", st)
	}
	if hinted.stdout != plain.stdout {
		t.Errorf("the root built from the hint differs from one built without:\nhinted:\n%s\nplain:\n%s", hinted.stdout, plain.stdout)
	}

	// A hint of another plan: the host's / read-write at /hostroot.
	evil, err := nsjail.EncodePlanHint(&mounts.Plan{RootSize: 4 << 20, Stage: "/tmp", Steps: []mounts.Step{
		{Kind: mounts.Bind, Source: "/", Target: "/hostroot"},
		{Kind: mounts.Bind, Source: ws, Target: "/workspace"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A hint whose step writes outside the staging directory (its staged
	// path rewritten in place, same length): the init must refuse to
	// build any of it, or the file would appear in the host's workspace.
	// (The stage must not hide the workspace: not /tmp, which holds it.)
	pwned := filepath.Join(ws, "pwned")
	stage := ""
	for _, c := range []string{"/var", "/mnt", "/srv", "/opt"} {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() && !strings.HasPrefix(ws, c+"/") {
			stage = c
			break
		}
	}
	if stage == "" {
		t.Fatalf("no directory outside the workspace %s to stage the escaping hint on", ws)
	}
	target := "/" + strings.Repeat("a", len(pwned)-len(stage)-1)
	escape, err := nsjail.EncodePlanHint(&mounts.Plan{RootSize: 4 << 20, Stage: stage, Steps: []mounts.Step{
		{Kind: mounts.File, Target: target, Data: "pwned\n", Mode: 0o644},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if staged := []byte(stage + target); len(staged) != len(pwned) || bytes.Count(escape, staged) != 1 {
		t.Fatalf("cannot rewrite the staged path in the hint (%d bytes, %d found)", len(staged), bytes.Count(escape, staged))
	}
	escape = bytes.Replace(escape, []byte(stage+target), []byte(pwned), 1)
	for name, data := range map[string][]byte{"other plan": evil, "garbage": []byte("\xff\xff\xff\xffnot a plan"), "escape": escape} {
		if err := os.WriteFile(hints[0], data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, r := run()
		if st != "unused" {
			t.Errorf("%s: hint state %q, want unused", name, st)
		}
		if strings.Contains(r.stdout, "/hostroot") || r.stdout != plain.stdout {
			t.Errorf("%s: the sandbox's root is not the planned one:\n%s", name, r.stdout)
		}
		if b, _ := os.ReadFile(hints[0]); bytes.Equal(b, data) {
			t.Errorf("%s: the unusable hint was not replaced", name)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Errorf("a plan hint step wrote %s on the host", pwned)
	}
}

// A host whose user.max_net_namespaces is 0 (but that allows user
// namespaces) fails to make the sandbox in the prestarted init's unshare,
// after the clone, or in the Go launch's clone: both must name the limit
// and how to raise it (exit 125). The test sets the limit
// inside a user namespace of its own, where the test user may.
func TestNamespaceLimitAdvice(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found: cannot lower a namespace limit in a user namespace of the test's own")
	}
	ws := userDir(t)
	for _, prestart := range []string{"", "1"} {
		cmd := hutchCmd(opts{dir: ws, env: []string{"HUTCH_NO_PRESTART=" + prestart}})
		cmd.Path = unshare
		cmd.Args = []string{"unshare", "-U", "-r", "sh", "-c",
			`echo 0 > /proc/sys/user/max_net_namespaces || exit 99; exec "$0" run -- /bin/true`, hutchBin}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code == 99 {
			t.Skipf("cannot lower user.max_net_namespaces in a user namespace here: %s", stderr.String())
		}
		if code != 125 || !strings.Contains(stderr.String(), "user.max_net_namespaces = 0") ||
			!strings.Contains(stderr.String(), "sysctl -w user.max_net_namespaces=") {
			t.Errorf("HUTCH_NO_PRESTART=%q: exit %d, stderr %q; want 125 naming user.max_net_namespaces and the sysctl that raises it", prestart, code, stderr.String())
		}
	}
}

// hutch started in a pid namespace that kept its parent's /proc (unshare
// --pid without --mount-proc): the prestarted init maps its user namespace
// itself and works; the Go launch path (HUTCH_NO_PRESTART=1, and every
// session) writes /proc/PID/uid_map with the child's pid as its own
// namespace numbers it, which names another process in that /proc, and
// must say so and how to fix it instead of a bare "fork/exec: permission
// denied".
func TestForeignProcAdvice(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) not found: cannot make a pid namespace without its own /proc")
	}
	ws := userDir(t)
	for _, prestart := range []string{"", "1"} {
		cmd := hutchCmd(opts{dir: ws, env: []string{"HUTCH_NO_PRESTART=" + prestart}})
		cmd.Path = unshare
		cmd.Args = []string{"unshare", "--user", "--map-root-user", "--pid", "--fork", "--", hutchBin, "run", "--", "/bin/echo", "in"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if prestart == "" {
			if code != 0 || stdout.String() != "in\n" {
				t.Errorf("prestarted init under a foreign /proc: exit %d, stdout %q, stderr %q; want 0 and \"in\"", code, stdout.String(), stderr.String())
			}
			continue
		}
		if code != 125 || !strings.Contains(stderr.String(), "/proc belongs to another pid namespace") ||
			!strings.Contains(stderr.String(), "--mount-proc") {
			t.Errorf("HUTCH_NO_PRESTART=1 under a foreign /proc: exit %d, stderr %q; want 125 saying /proc belongs to another pid namespace and how to mount one", code, stderr.String())
		}
	}
}
