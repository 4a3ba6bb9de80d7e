// Package bench holds hutch's Go benchmarks. They measure; they assert
// nothing about time (speed is reported as ratios by bench/run.sh and
// written up in docs/PERFORMANCE.md, never enforced by a timed test).
//
//	make build
//	HUTCH_BIN=$PWD/bin/hutch go test -run '^$' -bench . -benchtime 100x ./bench/
//
// Benchmarks that exec a program (host /bin/true, hutch run, bwrap) work
// for any caller: when the caller is root, the child runs as uid/gid 65534
// with a copy of the binary in a world-readable directory. Benchmarks that
// create namespaces or sandboxes in this process (the Go API, a warm
// sandbox, bare namespaces) need an unprivileged caller and skip with the
// reason otherwise; bench/run.sh compiles this package with `go test -c`
// and runs it as uid 65534 when it is started as root.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/egress"
	"github.com/hutchsandbox/hutch/gitrepos"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/store"
)

// env is what every benchmark shares, made once.
type env struct {
	base  string   // temporary directory holding everything below
	bin   string   // the hutch binary, executable by the runner
	ws    string   // workspace owned by the runner
	state string   // HOME, XDG_CACHE_HOME and XDG_STATE_HOME live here
	etc   string   // synthesized /etc files for the bwrap comparison
	vars  []string // environment of the children
	cred  *syscall.Credential
	root  bool
	skip  string // why the hutch benchmarks cannot run
}

var (
	envOnce sync.Once
	benv    env
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benv.base != "" {
		os.RemoveAll(benv.base)
	}
	os.Exit(code)
}

// setup copies HUTCH_BIN where the runner can execute it and makes the
// runner's directories. Failures become the skip reason.
func setup() *env {
	envOnce.Do(func() {
		e := &benv
		e.root = os.Getuid() == 0
		if e.root {
			e.cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
		}
		base, err := os.MkdirTemp("", "hutch-gobench-")
		if err != nil {
			e.skip = err.Error()
			return
		}
		e.base = base
		_ = os.Chmod(base, 0o755)
		e.ws, e.state, e.etc = filepath.Join(base, "ws"), filepath.Join(base, "state"), filepath.Join(base, "etc")
		for _, d := range []string{e.ws, e.state, e.etc} {
			if err := os.Mkdir(d, 0o755); err != nil {
				e.skip = err.Error()
				return
			}
			if e.root {
				_ = os.Chown(d, 65534, 65534)
			}
		}
		if err := writeSynthEtc(e.etc); err != nil {
			e.skip = err.Error()
			return
		}
		// Session sockets live in XDG_RUNTIME_DIR/hutch, which must be private.
		run := filepath.Join(e.state, "run")
		if err := os.Mkdir(run, 0o700); err != nil {
			e.skip = err.Error()
			return
		}
		if e.root {
			_ = os.Chown(run, 65534, 65534)
		}
		e.vars = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + e.state,
			"XDG_CACHE_HOME=" + e.state + "/cache", "XDG_STATE_HOME=" + e.state + "/state", "XDG_RUNTIME_DIR=" + run}
		src := os.Getenv("HUTCH_BIN")
		if src == "" {
			e.skip = "HUTCH_BIN is not set: build hutch (make build) and set HUTCH_BIN=$PWD/bin/hutch"
			return
		}
		b, err := os.ReadFile(src)
		if err != nil {
			e.skip = "HUTCH_BIN: " + err.Error()
			return
		}
		e.bin = filepath.Join(base, "hutch")
		if err := os.WriteFile(e.bin, b, 0o755); err != nil {
			e.skip = err.Error()
			return
		}
		// Warm the caches a real user has warm: the compiled seccomp filter
		// and the registry discovery (`policy show` always rediscovers and
		// stores the result for ten minutes).
		if out, err := e.command(e.bin, "policy", "show").CombinedOutput(); err != nil {
			e.skip = fmt.Sprintf("hutch policy show: %v: %s", err, out)
			return
		}
		if out, err := e.command(e.bin, "run", "--", "/bin/true").CombinedOutput(); err != nil {
			e.skip = fmt.Sprintf("hutch run -- /bin/true does not work here: %v: %s", err, out)
		}
	})
	return &benv
}

// writeSynthEtc writes the files hutch synthesizes in /etc (user, group,
// hostname, hosts, resolver), so bwrap binds comparable ones.
func writeSynthEtc(dir string) error {
	files := map[string]string{
		"passwd":        "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n",
		"group":         "root:x:0:\nsandbox:x:1000:\n",
		"hostname":      "hutch\n",
		"hosts":         "127.0.0.1 localhost hutch\n::1 localhost\n",
		"resolv.conf":   "nameserver 127.0.0.1\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
		"machine-id":    "0123456789abcdef0123456789abcdef\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// command is a child of the benchmark: in the workspace, with the runner's
// environment and, under root, uid/gid 65534.
func (e *env) command(argv ...string) *exec.Cmd {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = e.ws
	c.Env = e.vars
	if e.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	}
	return c
}

func (e *env) needHutch(b *testing.B) {
	b.Helper()
	if e.skip != "" {
		b.Skip(e.skip)
	}
}

// needUnprivileged skips benchmarks that make namespaces in this process.
func (e *env) needUnprivileged(b *testing.B) {
	b.Helper()
	if e.root {
		b.Skip("makes namespaces in the benchmark process: run as an unprivileged user (bench/run.sh runs the compiled test binary as uid 65534)")
	}
}

// runLoop execs argv b.N times and fails on a non-zero exit.
func runLoop(b *testing.B, e *env, argv ...string) {
	b.Helper()
	if out, err := e.command(argv...).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.command(argv...).Run(); err != nil {
			b.Fatalf("%s: %v", strings.Join(argv, " "), err)
		}
	}
}

// BwrapArgs is the bubblewrap command line equivalent to hutch's default
// mounts: read-only /usr (and /opt), the host's merged-/usr symlinks, the
// host's /etc with synthesized user files over it and its masked files
// covered, private /proc, /dev, /tmp and
// HOME, the workspace read-write at /workspace, a cleared environment,
// uid 1000, every namespace unshared. bench/run.sh builds the same line.
func BwrapArgs(ws, synthEtc string, argv ...string) []string {
	a := []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session",
		"--uid", "1000", "--gid", "1000", "--hostname", "hutch"}
	for _, d := range mounts.HostToolingDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			to, _ := os.Readlink(d)
			a = append(a, "--symlink", to, d)
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--ro-bind", "/etc", "/etc")
	regular := func(p string) bool { fi, err := os.Lstat(p); return err == nil && fi.Mode().IsRegular() }
	for _, m := range mounts.EtcMask {
		if regular("/etc/" + m.Path) {
			a = append(a, "--ro-bind", "/dev/null", "/etc/"+m.Path)
		}
	}
	for _, n := range mounts.EtcSynthesized {
		if regular("/etc/" + n) {
			a = append(a, "--ro-bind", filepath.Join(synthEtc, n), "/etc/"+n)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--tmpfs", "/home/sandbox", "--bind", ws, "/workspace", "--chdir", "/workspace",
		"--clearenv", "--setenv", "PATH", policy.DefaultPath, "--setenv", "HOME", "/home/sandbox", "--")
	return append(a, argv...)
}

// BenchmarkHostTrue: fork+exec of /bin/true on the host, the baseline.
func BenchmarkHostTrue(b *testing.B) {
	runLoop(b, setup(), "/bin/true")
}

// BenchmarkHostShTrue: `/bin/sh -c /bin/true` on the host, the baseline of
// MCP run_command, whose command is a shell command line run with sh -c.
func BenchmarkHostShTrue(b *testing.B) {
	runLoop(b, setup(), "/bin/sh", "-c", "/bin/true")
}

// BenchmarkHutchVersion: one start of hutch's static Go binary (what the
// supervisor and the init each pay before doing any work).
func BenchmarkHutchVersion(b *testing.B) {
	e := setup()
	e.needHutch(b)
	runLoop(b, e, e.bin, "--version")
}

// BenchmarkHutchRunTrue: `hutch run -- /bin/true`, cold, default policy
// (network mode proxy), and with --net none.
func BenchmarkHutchRunTrue(b *testing.B) {
	e := setup()
	e.needHutch(b)
	b.Run("net=proxy", func(b *testing.B) { runLoop(b, e, e.bin, "run", "--", "/bin/true") })
	b.Run("net=none", func(b *testing.B) { runLoop(b, e, e.bin, "run", "--net", "none", "--", "/bin/true") })
}

// BenchmarkBwrapTrue: bubblewrap with equivalent mounts running /bin/true.
func BenchmarkBwrapTrue(b *testing.B) {
	e := setup()
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	runLoop(b, e, BwrapArgs(e.ws, e.etc, "/bin/true")...)
}

// BenchmarkNamespaces: fork+exec of /bin/true from Go into fresh
// namespaces, to price each piece: none, a user namespace, hutch's set
// without a network namespace, and hutch's full set of seven.
func BenchmarkNamespaces(b *testing.B) {
	e := setup()
	e.needUnprivileged(b)
	base := unix.CLONE_NEWUSER
	six := base | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	for _, c := range []struct {
		name  string
		flags int
	}{{"none", 0}, {"user", base}, {"user+mnt+pid+ipc+uts+cgroup", six}, {"all7(+net)", six | unix.CLONE_NEWNET}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cmd := exec.Command("/bin/true")
				cmd.Env = []string{}
				if c.flags != 0 {
					cmd.SysProcAttr = &syscall.SysProcAttr{
						Cloneflags:  uintptr(c.flags),
						UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
						GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
					}
				}
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// apiPolicy is the default policy on the benchmark's workspace.
func apiPolicy(b *testing.B, e *env, net string) *policy.Policy {
	p := policy.Default()
	p.Filesystem.Workspace = e.ws
	p.Network.Mode = net
	if err := p.ResolvePaths(e.ws); err != nil {
		b.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	return p
}

func devNull(b *testing.B) *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkGoAPIRunTrue: hutch.Run of /bin/true from a Go program, a fresh
// sandbox per call (what run_command through the Go API costs today): no
// supervisor process start, everything else as `hutch run`.
func BenchmarkGoAPIRunTrue(b *testing.B) {
	e := setup()
	e.needHutch(b)
	e.needUnprivileged(b)
	null := devNull(b)
	for _, net := range []string{policy.NetProxy, policy.NetNone} {
		b.Run("net="+net, func(b *testing.B) {
			p := apiPolicy(b, e, net)
			ctx := context.Background()
			if net == policy.NetProxy {
				egress.DiscoverStored(ctx, store.Open(), e.ws, true) // warm the cache
			}
			o := &hutch.RunOptions{Policy: p, Argv: []string{"/bin/true"}, HostEnv: os.Environ(),
				Stdin: null, Stdout: null, Stderr: null, Executable: e.bin}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := hutch.Run(ctx, o)
				if err != nil {
					b.Fatal(err)
				}
				if res.ExitCode != 0 {
					b.Fatalf("exit %d: %v", res.ExitCode, res.Messages)
				}
			}
		})
	}
}

// BenchmarkGoAPISessionExecTrue: Session.Exec of /bin/true in a warm
// session sandbox (made once): what run_command costs through the Go API
// when the sandbox is kept across calls. Every Exec still gets the full
// per-command hardening (the exec stage: nested user namespace, no
// capabilities, Landlock, seccomp).
func BenchmarkGoAPISessionExecTrue(b *testing.B) {
	for _, net := range []string{policy.NetProxy, policy.NetNone} {
		b.Run("net="+net, func(b *testing.B) { benchSessionExec(b, net, "/bin/true") })
	}
}

// BenchmarkGoAPISessionExecShTrue: Session.Exec of `/bin/sh -c /bin/true`
// (run_command's shape) with output to /dev/null, in a warm session.
// Against HostShTrue it is the sandbox's share of an MCP call; against
// AgentRunCommand, the output capture's.
func BenchmarkGoAPISessionExecShTrue(b *testing.B) {
	benchSessionExec(b, policy.NetProxy, "/bin/sh", "-c", "/bin/true")
}

// benchSessionExec times Session.Exec of argv (stdio /dev/null) in one
// warm session with network mode net.
func benchSessionExec(b *testing.B, net string, argv ...string) {
	e := setup()
	e.needHutch(b)
	e.needUnprivileged(b)
	null := devNull(b)
	ctx := context.Background()
	sess, err := hutch.NewSession(ctx, &hutch.SessionOptions{Policy: apiPolicy(b, e, net), HostEnv: os.Environ(), Executable: e.bin})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	o := &hutch.ExecOptions{Argv: argv, Stdin: null, Stdout: null, Stderr: null}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := sess.Exec(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("exit %d: %v", res.ExitCode, res.Messages)
		}
	}
}

// BenchmarkGoAPILifecycle: a fresh sandbox per op through the Go API, split
// into phases reported as extra metrics (ms/op each): start (NewSession:
// plan, clone into seven namespaces, exec and Go runtime start of the init,
// mounts, Landlock, egress proxy), exec (Session.Exec of /bin/true) and
// close (SIGKILL of the init, the wait for its pid namespace to empty,
// proxy stop, placeholder cleanup).
func BenchmarkGoAPILifecycle(b *testing.B) {
	e := setup()
	e.needHutch(b)
	e.needUnprivileged(b)
	null := devNull(b)
	for _, net := range []string{policy.NetProxy, policy.NetNone} {
		b.Run("net="+net, func(b *testing.B) {
			ctx := context.Background()
			p := apiPolicy(b, e, net)
			o := &hutch.ExecOptions{Argv: []string{"/bin/true"}, Stdin: null, Stdout: null, Stderr: null}
			var tStart, tExec, tClose time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				sess, err := hutch.NewSession(ctx, &hutch.SessionOptions{Policy: p, HostEnv: os.Environ(), Executable: e.bin})
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if res, err := sess.Exec(ctx, o); err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %v %v", err, res)
				}
				t2 := time.Now()
				sess.Close()
				t3 := time.Now()
				tStart += t1.Sub(t0)
				tExec += t2.Sub(t1)
				tClose += t3.Sub(t2)
			}
			n := float64(b.N) * 1e6
			b.ReportMetric(float64(tStart.Nanoseconds())/n, "start-ms/op")
			b.ReportMetric(float64(tExec.Nanoseconds())/n, "exec-ms/op")
			b.ReportMetric(float64(tClose.Nanoseconds())/n, "close-ms/op")
		})
	}
}

// BenchmarkHutchExecTrue: the CLI `hutch exec NAME -- /bin/true` into a
// session started with `hutch session start`.
func BenchmarkHutchExecTrue(b *testing.B) {
	e := setup()
	e.needHutch(b)
	if err := e.command(e.bin, "session", "start", "--help").Run(); err != nil {
		b.Skip("this hutch has no sessions (hutch session start --help fails)")
	}
	name := fmt.Sprintf("gobench-%d", os.Getpid())
	if out, err := e.command(e.bin, "session", "start", "--name", name).CombinedOutput(); err != nil {
		b.Fatalf("hutch session start: %v: %s", err, out)
	}
	defer e.command(e.bin, "session", "stop", name).Run()
	runLoop(b, e, e.bin, "exec", name, "--", "/bin/true")
}

// mcpClient speaks newline-delimited JSON-RPC to `hutch mcp` on stdio.
type mcpClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func (c *mcpClient) call(method string, params any) (map[string]any, error) {
	c.id++
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	if _, err := c.in.Write(append(msg, '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		var r map[string]any
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		if id, ok := r["id"].(float64); ok && int(id) == c.id {
			if e, ok := r["error"]; ok {
				return nil, fmt.Errorf("%s: %v", method, e)
			}
			res, _ := r["result"].(map[string]any)
			return res, nil
		}
	}
}

// BenchmarkAgentRunCommand: the run_command tool in-process, without the
// JSON-RPC layer: agent.Tool over a warm session, "/bin/true" as the command
// line (so /bin/sh -c /bin/true inside), stdout and stderr captured through
// pipes. MCPRunCommand minus this is what the protocol costs; this minus
// HostShTrue is what the sandbox and the capture cost.
func BenchmarkAgentRunCommand(b *testing.B) {
	e := setup()
	e.needHutch(b)
	e.needUnprivileged(b)
	ctx := context.Background()
	ex, err := agent.NewSessionExecutor(ctx, &agent.HutchExecutor{Policy: apiPolicy(b, e, policy.NetProxy), Executable: e.bin})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	tool := &agent.Tool{Exec: ex}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := tool.RunCommand(ctx, agent.RunCommandInput{Command: "/bin/true"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run_command /bin/true: %+v, %v", res, err)
		}
	}
}

// BenchmarkMCPRunCommand: one run_command call ("/bin/true") through
// `hutch mcp`, from the JSON-RPC request to its answer, the server started
// once. The command runs as `/bin/sh -c` in the server's warm session.
func BenchmarkMCPRunCommand(b *testing.B) {
	call := startMCP(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		call()
	}
}

// BenchmarkMCPRunCommandPaired interleaves the two sides of the MCP
// target: each iteration runs `/bin/sh -c /bin/true` on the host, then the
// same command line through run_command, and the medians of both and of
// their per-pair differences are reported (host-sh-ms, mcp-ms, over-ms).
// This VM's speed drifts by more than the target's margin between two
// benchmarks run one after the other; pairs put any drift on both sides
// alike, as the interleaved cold start does (ns/op is the sum of a pair).
func BenchmarkMCPRunCommandPaired(b *testing.B) {
	call := startMCP(b)
	host, mcp, over := make([]float64, 0, b.N), make([]float64, 0, b.N), make([]float64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if err := exec.Command("/bin/sh", "-c", "/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		h := time.Since(t)
		t = time.Now()
		call()
		m := time.Since(t)
		host, mcp, over = append(host, ms(h)), append(mcp, ms(m)), append(over, ms(m-h))
	}
	b.ReportMetric(median(host), "host-sh-ms")
	b.ReportMetric(median(mcp), "mcp-ms")
	b.ReportMetric(median(over), "over-ms")
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// startMCP starts `hutch mcp` for the benchmark and returns a function
// that makes one run_command call of "/bin/true" and checks its result.
func startMCP(b *testing.B) func() {
	e := setup()
	e.needHutch(b)
	if err := e.command(e.bin, "mcp", "--help").Run(); err != nil {
		b.Skip("this hutch has no MCP server (hutch mcp --help fails)")
	}
	cmd := e.command(e.bin, "mcp")
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	c := &mcpClient{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if _, err := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "hutch-bench", "version": "0"}}); err != nil {
		b.Fatal(err)
	}
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	if _, err := in.Write(append(note, '\n')); err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"name": "run_command", "arguments": map[string]any{"command": "/bin/true"}}
	check := func() {
		res, err := c.call("tools/call", args)
		if err != nil {
			b.Fatal(err)
		}
		sc, _ := res["structuredContent"].(map[string]any)
		if isErr, _ := res["isError"].(bool); isErr || sc == nil || sc["exit_code"] != float64(0) {
			b.Fatalf("run_command /bin/true: %v", res)
		}
	}
	check()
	return check
}

// BenchmarkSupervisorPlan prices the supervisor's work before it clones the
// init (the "supervisor.plan" stage of --debug), piece by piece, in this
// process: the policy, the host facts, the whole plan, the protected-path
// placeholders, the mount plan and the seccomp filter (compiled from
// scratch, and read from the store as every run after the first does).
func BenchmarkSupervisorPlan(b *testing.B) {
	e := setup()
	if e.ws == "" {
		b.Skip(e.skip)
	}
	ws := b.TempDir()
	b.Run("policy", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p := policy.Default()
			p.Filesystem.Workspace = ws
			if err := p.ResolvePaths(ws); err != nil {
				b.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	p := policy.Default()
	p.Filesystem.Workspace = ws
	b.Run("gather", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := plan.Gather(p, plan.GatherOptions{Env: os.Environ()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("build", func(b *testing.B) {
		h, err := plan.Gather(p, plan.GatherOptions{Env: os.Environ()})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := plan.Build(p, h, &plan.Request{Argv: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protected-paths", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := mounts.InspectProtected(ws, policy.WorkspaceMount, p.Filesystem.Protected, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("git-repos", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			gitrepos.Find(ws, gitrepos.DefaultBudget)
		}
	})
	b.Run("mount-plan", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := mounts.Build(&mounts.Spec{Tooling: "host", Workspace: ws, WorkspaceMount: policy.WorkspaceMount,
				Home: policy.SandboxHome, TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20,
				UID: 1000, GID: 1000, User: "sandbox", Hostname: "hutch"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	watch, _ := seccompprofiles.NotifyAvailable()
	b.Run("seccomp-compile", func(b *testing.B) {
		o := seccompprofiles.LoadOptions{Notify: true, WatchNetwork: watch}
		for i := 0; i < b.N; i++ {
			if _, err := seccompprofiles.Load(context.Background(), o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("seccomp-cache-hit", func(b *testing.B) {
		o := seccompprofiles.LoadOptions{Notify: true, WatchNetwork: watch, Store: store.At(b.TempDir())}
		if _, err := seccompprofiles.Load(context.Background(), o); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := seccompprofiles.Load(context.Background(), o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
