package nsjail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/internal/memfd"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/plan"
)

// Config configures the launch of one sandbox's init.
type Config struct {
	// Executable is the hutch binary to re-exec; "" means /proc/self/exe.
	Executable string
	// Stderr receives the init's own diagnostics (never the command's
	// output); nil discards them.
	Stderr io.Writer
	Logger *slog.Logger
	// CgroupFD, when > 0, is a cgroup v2 directory the init starts in
	// atomically (clone3 CLONE_INTO_CGROUP).
	CgroupFD int
	// AfterStart runs with the init's pid before the init is configured
	// (and so before it runs any command): e.g. joining a v1 cgroup.
	AfterStart func(pid int) error
	// Prestarted, when set, is an init already started in its namespaces
	// (see package prestart); Launch adopts it instead of starting one, or
	// discards it when it cannot be used (a cgroup it cannot be moved into)
	// and starts one the usual way.
	Prestarted *Prestarted
	// Spawner lets a session's commands after its first start from a
	// spawner (plan.Process.Spawner; see spawner.go).
	Spawner bool
	// Listener, when the sandbox's seccomp filter notifies, is called for
	// each seccomp listener the sandbox will send: for a command started the
	// direct way (p is that command; it has not started yet), or for the
	// spawner (p is nil: its listener serves every command it starts). It
	// returns the end of a socketpair to hand to the sandbox, which Exec
	// closes; the caller serves the other end. nil: no notification.
	Listener func(p *Process) (*os.File, error)
	// NoNamespaces starts the init in no namespace at all (the landlock
	// isolation, plan.Sandbox.Isolation): it is the child subreaper of the
	// sandbox's processes and kills them before it exits; the commands run
	// as the invoking user under Landlock, seccomp and rlimits, on the
	// host's filesystem, processes and network. A prestarted init is
	// discarded.
	NoNamespaces bool
}

// Prestarted is an init started before the Go runtime (package prestart):
// a child of this process in the seven new namespaces, waiting for its
// setup on Control.
type Prestarted struct {
	Pid     int
	Control *os.File
	// Forked is when it was cloned (CLOCK_MONOTONIC), for timings.
	Forked unix.Timespec
	// PlanHint is the file the init was handed as its plan hint (it may
	// not exist); the caller stores the plan there when the init reports
	// the hint unusable or missing. "" when there is no cache directory.
	PlanHint string
}

// Discard ends a prestarted init that is not used: closing the control
// socket makes it exit; it is killed and reaped in any case.
func (p *Prestarted) Discard() {
	if p == nil || p.Control == nil {
		return
	}
	p.Control.Close()
	p.Control = nil
	if proc, err := os.FindProcess(p.Pid); err == nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}
}

// Sandbox is a running sandbox: an init holding the namespaces.
type Sandbox struct {
	ctrl    *conn
	initPid int
	// initProc signals the init through a pidfd: never a recycled pid.
	initProc *os.Process
	// Ready is what the init reported after setup.
	Ready *Ready
	// Timing is the init's per-stage timing, when requested.
	Timing []Stage
	// ProxyFiles are the egress proxy's sockets made inside the sandbox's
	// network namespace (HTTP listener, SOCKS5 listener, DNS UDP socket),
	// when Setup.Proxy was set. The caller serves them and closes them.
	ProxyFiles []*os.File

	initDone chan struct{}
	release  chan struct{}
	// forked is when the init was forked (CLOCK_MONOTONIC), for timings.
	forked unix.Timespec
	// launched is closed when the init's exec succeeded (initPid set) or
	// failed (launchErr set).
	launched   chan struct{}
	launchErr  error
	afterStart func(pid int) error

	cfg          Config
	spawner      spawnerGate
	spawnerMu    sync.Mutex
	spawnerReply chan *message

	mu sync.Mutex
	// root is an O_PATH descriptor of the sandbox's root as the init
	// built it (its READY message), or -1: where OpenPTY finds the
	// sandbox's devpts.
	root   int
	alone  bool // the last exit report said no sandboxed process was left
	nextID uint64
	procs  map[uint64]*Process
	dead   error
	closed bool

	// sockets are the socket requests waiting for the init's reply
	// (loopback.go), by request id; guarded by mu.
	sockets map[uint64]chan socketReply
}

// Process is one command started in a sandbox.
type Process struct {
	ID  uint64
	Pid int // in the sandbox's pid namespace
	// Tag is the caller's, from ExecRequest.Tag.
	Tag any
	sb  *Sandbox
	req *ExecRequest

	started chan struct{}
	done    chan struct{}
	exit    ExitInfo
}

// ExitInfo says how a command ended.
type ExitInfo struct {
	// Status is the raw wait status, valid when ExecCode == 0 and Err == nil.
	Status unix.WaitStatus
	// ExecCode is non-zero when the command could not be executed (126,
	// 127) or its per-command setup failed (125); ExecError says why.
	ExecCode  int
	ExecError string
	// Err is set when the sandbox died before the command ended.
	Err error
	// Leftover is how many processes the command left behind, which its
	// reaper killed when it ended.
	Leftover int
}

// Code is the exit code hutch reports: the command's own, 128+N when it was
// killed by signal N, or ExecCode.
func (e ExitInfo) Code() int {
	switch {
	case e.Err != nil:
		return 125
	case e.ExecCode != 0:
		return e.ExecCode
	case e.Status.Signaled():
		return 128 + int(e.Status.Signal())
	default:
		return e.Status.ExitStatus()
	}
}

// SetupError is a failure to build the sandbox, with its cause in words.
type SetupError struct {
	Op  string
	Err error
}

func (e *SetupError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// Launch starts the sandbox's init in new namespaces and returns without
// waiting for it:
// the init's exec overlaps with whatever the caller computes before
// Configure (the mount plan, the seccomp program). The init dies with the
// calling goroutine's OS thread's process (parent-death signal) and with
// Close; until Configure succeeds it runs nothing.
func Launch(cfg *Config) (*Sandbox, error) {
	if cfg.NoNamespaces {
		cfg.Prestarted.Discard() // in namespaces: of no use here
	}
	if pre := cfg.Prestarted; pre != nil && pre.Control != nil && !cfg.NoNamespaces {
		s, err := adopt(cfg, pre)
		if err == nil {
			if cfg.Logger != nil {
				cfg.Logger.Debug("sandbox init: prestarted before the Go runtime, adopted", "pid", s.initPid)
			}
			return s, nil
		}
		pre.Discard()
		if cfg.Logger != nil {
			cfg.Logger.Debug("prestarted init not used; launching another", "reason", err)
		}
	}
	exe := cfg.Executable
	if exe == "" {
		exe = "/proc/self/exe"
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &SetupError{"create control socket", err}
	}
	parent := os.NewFile(uintptr(pair[0]), "control")
	child := os.NewFile(uintptr(pair[1]), "control-init")

	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{initMagic},
		Env:         []string{},
		ExtraFiles:  []*os.File{child},
		Stderr:      cfg.Stderr,
		SysProcAttr: initNamespaces(),
	}
	if cfg.NoNamespaces {
		// SIGTERM, not SIGKILL: the init kills the sandbox's processes
		// before it exits, which no pid namespace does for it.
		cmd.Args = append(cmd.Args, noNamespacesArg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	}
	if cfg.CgroupFD > 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cfg.CgroupFD
	}
	s, err := newSandbox(parent, cfg)
	if err != nil {
		child.Close()
		return nil, &SetupError{"control socket", err}
	}
	// The parent-death signal fires when the thread that forked the init
	// exits, so that thread stays locked and alive for the sandbox's life.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &s.forked)
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		child.Close()
		if err != nil {
			s.launchErr = err
			close(s.launched)
			close(s.initDone)
			return // the locked thread ends with the goroutine
		}
		s.initPid = cmd.Process.Pid
		s.initProc = cmd.Process
		close(s.launched)
		_ = cmd.Wait()
		close(s.initDone)
		<-s.release
		runtime.UnlockOSThread()
	}()
	return s, nil
}

// initNamespaces are the init's namespaces (all seven) and one-id maps
// (the invoking user as 0), and its parent-death signal.
func initNamespaces() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
			unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// newSandbox is a Sandbox talking to an init over ctrl, not launched yet.
func newSandbox(ctrl *os.File, cfg *Config) (*Sandbox, error) {
	c, err := newConn(ctrl)
	if err != nil {
		return nil, err
	}
	return &Sandbox{
		ctrl:         c,
		cfg:          *cfg,
		afterStart:   cfg.AfterStart,
		launched:     make(chan struct{}),
		initDone:     make(chan struct{}),
		release:      make(chan struct{}),
		procs:        map[uint64]*Process{},
		spawnerReply: make(chan *message, 1),
		root:         -1,
	}, nil
}

// adopt makes a Sandbox of a prestarted init: it joins its cgroup (a
// prestarted init could not be cloned into it) before it runs anything.
func adopt(cfg *Config, pre *Prestarted) (*Sandbox, error) {
	if cfg.Executable != "" {
		return nil, errors.New("a specific executable was asked for")
	}
	if cfg.CgroupFD > 0 {
		fd, err := unix.Openat(cfg.CgroupFD, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open cgroup.procs: %w", err)
		}
		_, err = unix.Write(fd, []byte(strconv.Itoa(pre.Pid)))
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("move the init into its cgroup: %w", err)
		}
	}
	proc, err := os.FindProcess(pre.Pid)
	if err != nil {
		return nil, fmt.Errorf("find the prestarted init: %w", err)
	}
	s, err := newSandbox(pre.Control, cfg)
	if err != nil {
		return nil, err
	}
	s.initPid, s.initProc, s.forked = pre.Pid, proc, pre.Forked
	pre.Control = nil // the Sandbox owns it now
	close(s.launched)
	go func() {
		reap(proc, pre.Pid)
		close(s.initDone)
	}()
	return s, nil
}

// reap waits for the prestarted init (our child), pid, to exit and reaps
// it. It waits on a pidfd in the runtime's poller, parked: proc.Wait would
// hold a thread in waitid for the sandbox's whole life. Where that fails
// (no pidfd, not pollable) it falls back to proc.Wait.
func reap(proc *os.Process, pid int) {
	if pfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(pfd), "init pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			var werr error
			rerr := rc.Read(func(fd uintptr) bool {
				for {
					var info unix.Siginfo
					werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
					switch {
					case werr == unix.EINTR:
						continue
					case werr == unix.EAGAIN || (werr == nil && info.Signo == 0):
						return false // still running: wait for the pidfd to be readable
					}
					return true
				}
			})
			if rerr == nil && werr == nil {
				return
			}
		}
	}
	_, _ = proc.Wait()
}

// Configure has the launched init build the sandbox from setup (root
// filesystem, proxy sockets), builds and hands over the Landlock ruleset,
// and waits until the sandbox is ready for commands. On error the sandbox
// is closed.
func (s *Sandbox) Configure(ctx context.Context, setup *Setup) error {
	err := s.configure(ctx, setup)
	if err != nil {
		s.kill()
	}
	return err
}

func (s *Sandbox) configure(ctx context.Context, setup *Setup) error {
	<-s.launched
	if s.launchErr != nil {
		return &SetupError{"create the sandbox's namespaces", diagnoseClone(s.launchErr)}
	}
	if s.afterStart != nil {
		if err := s.afterStart(s.initPid); err != nil {
			return &SetupError{"place the sandbox in its cgroup", err}
		}
	}
	var fds []int
	if setup.Seccomp != nil {
		memfd, err := bpfMemfd(setup.Seccomp)
		if err != nil {
			return &SetupError{"prepare seccomp program", err}
		}
		defer memfd.Close()
		fds = append(fds, int(memfd.Fd()))
	}
	proxy := setup.Sandbox.Network.Proxy != nil
	if err := s.ctrl.send(&message{Op: opSetup, Setup: setup}, fds...); err != nil {
		if errors.Is(err, unix.EPIPE) {
			// The init is gone; it may have said why before it went
			// (a prestarted init's failed step), and a closed peer's
			// queue never blocks.
			if m, fds, rerr := s.ctrl.recv(); rerr == nil && m.Op == opFail {
				closeAll(fds)
				return &SetupError{"build the sandbox", errors.New(diagnoseInitFailure(m))}
			}
		}
		return &SetupError{"configure the sandbox", err}
	}
	type reply struct {
		m   *message
		fds []int
		err error
	}
	rc := make(chan reply, 1)
	go func() {
		m, fds, err := s.ctrl.recv()
		rc <- reply{m, fds, err}
	}()
	var r reply
	select {
	case r = <-rc:
	case <-ctx.Done():
		return &SetupError{"build the sandbox", ctx.Err()}
	}
	if r.err != nil {
		return &SetupError{"build the sandbox", fmt.Errorf("the sandbox init exited during setup (%v)", r.err)}
	}
	switch r.m.Op {
	case opReady:
	case opFail:
		closeAll(r.fds)
		return &SetupError{"build the sandbox", errors.New(diagnoseInitFailure(r.m))}
	default:
		closeAll(r.fds)
		return &SetupError{"build the sandbox", fmt.Errorf("unexpected message %d from init", r.m.Op)}
	}
	want := 1
	if proxy {
		want = 4
	}
	if len(r.fds) != want {
		closeAll(r.fds)
		return &SetupError{"build the sandbox", fmt.Errorf("the init handed over %d descriptors, not %d (root and egress proxy sockets)", len(r.fds), want)}
	}
	for _, st := range r.m.Timing {
		if st.Name == "@entered" {
			// An absolute CLOCK_MONOTONIC reading, shared across namespaces.
			st = Stage{Name: "init.exec", Usec: st.Usec - s.forked.Nano()/1000}
		}
		s.Timing = append(s.Timing, st)
	}
	for i, name := range []string{"proxy-http", "proxy-socks5", "dns"} {
		if proxy {
			s.ProxyFiles = append(s.ProxyFiles, os.NewFile(uintptr(r.fds[1+i]), name))
		}
	}
	s.Ready = &Ready{PlanHint: hintState(r.m.Hint)}
	ll := setup.Sandbox.Landlock
	if s.cfg.NoNamespaces && ll.Rules.TCP {
		// The proxy's ports on the host's loopback, chosen by the kernel
		// as the init bound them: the only TCP destinations.
		ll.Rules.ConnectTCP = slices.Clone(ll.Rules.ConnectTCP)
		for _, p := range s.ProxyPorts()[:min(2, len(s.ProxyFiles))] {
			ll.Rules.ConnectTCP = append(ll.Rules.ConnectTCP, uint16(p))
		}
	}
	err := s.landlock(ll, r.fds[0], setup.Stdio)
	s.mu.Lock()
	s.root = r.fds[0] // for OpenPTY; closed with the sandbox
	s.mu.Unlock()
	if err != nil {
		for _, f := range s.ProxyFiles {
			f.Close()
		}
		s.ProxyFiles = nil
		return &SetupError{"build the sandbox", err}
	}
	go s.dispatch()
	return nil
}

// landlock builds the Landlock ruleset beneath root, the sandbox's new
// root as the init sees it (no sandboxed code has run yet), with a rule
// for each of stdio that is a file on the host (Setup.Stdio), records what
// this kernel enforces, and hands the ruleset to the init, which gives it
// to every command's exec stage.
func (s *Sandbox) landlock(ll plan.Landlock, root int, stdio []*os.File) error {
	t0 := time.Now()
	fd, rep, err := landlock.BuildBeneath(root, ll.Rules, ll.Strict)
	for _, f := range stdio {
		if err != nil || fd < 0 {
			break
		}
		if f == nil {
			continue
		}
		if _, ferr := landlock.AddOpenFileRule(fd, int(f.Fd())); ferr != nil {
			unix.Close(fd)
			return ferr
		}
	}
	s.Ready.LandlockABI = rep.ABI
	s.Ready.LandlockEnforced = rep.Enforced
	s.Ready.LandlockNotEnforced = rep.NotEnforced
	if err != nil {
		return fmt.Errorf("landlock (enforcement = \"strict\"): %w", err)
	}
	if fd < 0 {
		return nil
	}
	defer unix.Close(fd)
	if err := s.ctrl.send(&message{Op: opLandlock}, fd); err != nil {
		return fmt.Errorf("hand the Landlock ruleset to the init: %w", err)
	}
	if s.Timing != nil {
		s.Timing = append(s.Timing, Stage{Name: "supervisor.landlock", Usec: time.Since(t0).Microseconds()})
	}
	return nil
}

func bpfMemfd(prog []byte) (*os.File, error) {
	return sealedMemfd("hutch-seccomp", prog)
}

// sealedPayload is a spawn request's payload in a sealed memfd.
func sealedPayload(sp *Spawn) (*os.File, error) {
	b, err := encodePayload(sp)
	if err != nil {
		return nil, err
	}
	return sealedMemfd("hutch-spawn", b)
}

// sealedMemfd is data in a memfd that nothing can change any more (no
// write, grow, shrink or further seals): what the init and the reapers read
// from it is what the supervisor wrote.
func sealedMemfd(name string, data []byte) (*os.File, error) {
	fd, err := memfd.NoExec(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	// Sealed: nothing can change the program once the init holds it.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	return f, nil
}

// dispatch routes the init's messages to the processes they concern.
func (s *Sandbox) dispatch() {
	for {
		m, fds, err := s.ctrl.recv()
		if err == nil && m.Op == opSocketReply {
			s.socketReplied(m, fds) // takes the socket
			continue
		}
		closeAll(fds)
		if err != nil {
			s.fail(fmt.Errorf("the sandbox ended: %w", err))
			return
		}
		if m.Op == opSpawnerReply {
			select {
			case s.spawnerReply <- m:
			default: // nobody asked
			}
			continue
		}
		s.mu.Lock()
		p := s.procs[m.ID]
		s.mu.Unlock()
		if p == nil {
			continue
		}
		switch m.Op {
		case opStarted:
			p.Pid = m.Pid
			close(p.started)
		case opSpawnErr:
			if m.Code == codeNoSpawner {
				// Nothing ran: start it the direct way, and every later
				// command too.
				s.spawnerGone()
				if err := s.send(p, false); err != nil {
					p.exit = ExitInfo{Err: fmt.Errorf("start the command: %w", err)}
					p.finish()
				}
				continue
			}
			p.exit = ExitInfo{ExecCode: m.Code, ExecError: m.Error}
			p.finish()
		case opExit:
			s.mu.Lock()
			s.alone = m.Alone
			s.mu.Unlock()
			p.exit = ExitInfo{Status: unix.WaitStatus(m.Status), ExecCode: m.Code, Leftover: m.Leftover}
			if m.Code != 0 {
				p.exit.ExecError = fmt.Sprintf("%s: %s", m.Error, syscall.Errno(m.Errno).Error())
			}
			p.finish()
		}
	}
}

func (p *Process) finish() {
	p.sb.mu.Lock()
	delete(p.sb.procs, p.ID)
	p.sb.mu.Unlock()
	select {
	case <-p.started:
	default:
		close(p.started)
	}
	close(p.done)
}

// fail ends every outstanding process with err.
func (s *Sandbox) fail(err error) {
	s.mu.Lock()
	s.dead = err
	procs := s.procs
	s.procs = map[uint64]*Process{}
	for id, ch := range s.sockets {
		close(ch) // no reply will come
		delete(s.sockets, id)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.exit = ExitInfo{Err: err}
		select {
		case <-p.started:
		default:
			close(p.started)
		}
		close(p.done)
	}
}

// ExecRequest describes one command to run in the sandbox.
type ExecRequest struct {
	Argv []string
	Env  []string
	Cwd  string
	// Stdin, Stdout and Stderr are handed to the command as they are
	// (passed as descriptors, not copied). They must stay open until the
	// command has started.
	Stdin, Stdout, Stderr *os.File
	// Tag is the caller's own, kept in the Process (e.g. where to record
	// the command's security events; see CommandOf).
	Tag any
	// Terminal, when set, is the master of a pseudo-terminal of the
	// sandbox's own (OpenPTY): its slave replaces each of Stdin, Stdout
	// and Stderr that TerminalStreams names, and the command takes it as
	// its controlling terminal, leading a session of its own.
	Terminal        *os.File
	TerminalStreams [3]bool
}

// requestSpawner has the init start the session's spawner: a process in
// the commands' user namespace that applies the restrictions every command
// shares (capabilities, no_new_privs, the Landlock ruleset, the seccomp
// filter) once and forks each later command's reaper, which inherits them
// (execstage.c). scope is a Landlock ruleset that only scopes signals and
// abstract unix sockets (landlock.ScopeRuleset): every command gets a
// layer of it, away from the spawner and the other commands. With a
// seccomp filter that notifies, notify receives the spawner's listener,
// shared by every command it starts. The descriptors are not closed.
func (s *Sandbox) requestSpawner(scope int, notify *os.File) error {
	s.spawnerMu.Lock()
	defer s.spawnerMu.Unlock()
	fds := []int{scope}
	m := &message{Op: opSpawner}
	if notify != nil {
		fds = append(fds, int(notify.Fd()))
		m.SpawnerNotify = true
	}
	if err := s.ctrl.send(m, fds...); err != nil {
		return err
	}
	select {
	case r := <-s.spawnerReply:
		if r.Code != 0 {
			return errors.New(r.Error)
		}
		return nil
	case <-s.initDone:
		return errors.New("the sandbox ended")
	}
}

// Exec starts a command in the sandbox: the direct way (the init forks its
// exec stage), or, for a session's later commands where the plan allows,
// from the spawner (see spawner.go); a command the spawner could not take
// because it is gone starts the direct way.
func (s *Sandbox) Exec(req *ExecRequest) (*Process, error) {
	via := s.useSpawner()
	s.mu.Lock()
	if s.dead != nil {
		s.mu.Unlock()
		return nil, s.dead
	}
	s.nextID++
	p := &Process{ID: s.nextID, Tag: req.Tag, sb: s, req: req, started: make(chan struct{}), done: make(chan struct{})}
	// Known before it can run, so that its first seccomp notification is
	// attributed to it (CommandOf).
	s.procs[p.ID] = p
	s.mu.Unlock()
	if err := s.send(p, via); err != nil {
		s.mu.Lock()
		delete(s.procs, p.ID)
		s.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// send sends p's spawn request, through the spawner or the direct way
// (then with a seccomp listener socket of its own when the filter notifies).
func (s *Sandbox) send(p *Process, via bool) error {
	req := p.req
	sp := &Spawn{Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, ViaSpawner: via, Terminal: req.Terminal != nil}
	payload, err := sealedPayload(sp)
	if err != nil {
		return err
	}
	defer payload.Close()
	fds := []int{int(req.Stdin.Fd()), int(req.Stdout.Fd()), int(req.Stderr.Fd()), int(payload.Fd())}
	if req.Terminal != nil {
		// The slave only travels: once the sandbox holds it (or the
		// request failed), no copy here keeps the terminal open.
		slave, err := ptySlave(req.Terminal)
		if err != nil {
			return err
		}
		defer unix.Close(slave)
		for i, on := range req.TerminalStreams {
			if on {
				fds[i] = slave
			}
		}
	}
	if !via && s.cfg.Listener != nil {
		child, err := s.cfg.Listener(p)
		if err != nil {
			return err
		}
		if child != nil {
			defer child.Close()
			sp.Notify = true
			fds = append(fds, int(child.Fd()))
		}
	}
	return s.ctrl.send(&message{Op: opSpawn, ID: p.ID, Spawn: sp}, fds...)
}

// Started is closed when the init reported the command started (Pid is set
// then) or the command ended without starting. The init reports a command
// started directly at once, one from the spawner when asked (RequestPids).
func (p *Process) Started() <-chan struct{} { return p.started }

// RequestPids asks the init to report the commands from the spawner that
// it has started and not reported (each Process's Started then closes).
func (s *Sandbox) RequestPids() error {
	return s.ctrl.send(&message{Op: opPids})
}

// Wait blocks until the command ends.
func (p *Process) Wait() ExitInfo {
	<-p.done
	return p.exit
}

// Done is closed when the command has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.sb.ctrl.send(&message{Op: opSignal, ID: p.ID, Signal: int(sig)})
}

// Terminate kills the command and every process it started, leaving the
// rest of the sandbox (other commands of a session) alone. Wait then
// reports it as killed by SIGKILL.
func (p *Process) Terminate() error {
	return p.sb.ctrl.send(&message{Op: opSignal, ID: p.ID, Signal: sigTerminate})
}

// Empty reports whether no sandboxed process runs: no command is
// outstanding and, at the last command's end, the init had no other child.
// Only the init is then left; nothing inside can act any more.
func (s *Sandbox) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.procs) == 0 && s.alone
}

// Kill sends the init SIGKILL and returns: the kernel then tears the pid
// namespace down. Close waits for it. An init without namespaces gets
// SIGTERM instead, and kills every process of the sandbox before it exits.
func (s *Sandbox) Kill() {
	<-s.launched
	if s.initProc != nil {
		sig := syscall.SIGKILL
		if s.cfg.NoNamespaces {
			sig = syscall.SIGTERM
		}
		_ = s.initProc.Signal(sig) // "already finished" once reaped
	}
}

// ProxyPorts are the ports of ProxyFiles (HTTP proxy, SOCKS5 proxy, DNS),
// as bound: without namespaces, ephemeral ports on the host's loopback.
func (s *Sandbox) ProxyPorts() []int {
	var ports []int
	for _, f := range s.ProxyFiles {
		port := 0
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { // not f.Fd(), which would make it blocking
				if sa, err := unix.Getsockname(int(fd)); err == nil {
					if in4, ok := sa.(*unix.SockaddrInet4); ok {
						port = in4.Port
					}
				}
			})
		}
		ports = append(ports, port)
	}
	return ports
}

// kill ends the sandbox at once: SIGKILL to the init takes the whole pid
// namespace with it.
func (s *Sandbox) kill() {
	s.Kill()
	<-s.initDone
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.release)
		s.ctrl.f.Close()
		if s.root >= 0 {
			unix.Close(s.root)
			s.root = -1
		}
	}
	s.mu.Unlock()
}

// Close kills everything in the sandbox and waits until the init is gone.
// Nothing of the sandbox remains afterwards.
func (s *Sandbox) Close() error {
	s.kill()
	return nil
}

// Done is closed when the init has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.initDone }

// InitPid is the init's pid on the host.
func (s *Sandbox) InitPid() int { return s.initPid }
