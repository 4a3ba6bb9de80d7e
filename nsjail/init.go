package nsjail

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/mounts"
)

// initMagic is argv[0] of the init stage.
const initMagic = "hutch:init"

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == initMagic }

// initFDControl is the init's end of the control socket.
const initFDControl = 3

// InitMain is the body of the sandbox init: pid 1 of the sandbox's pid
// namespace, root of its user namespace (mapped to the invoking host user).
// It builds the root filesystem, then starts commands on the supervisor's
// request and reaps every process. It exits when the supervisor goes away,
// and the kernel then kills everything left in the pid namespace.
func InitMain() {
	// Pid 1 gets only the signals it has handlers for from inside its pid
	// namespace; ignore every catchable one so sandboxed code cannot stop it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGWINCH,
		syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGIO)
	// Not dumpable: /proc/1/{mem,fd,environ} stay closed to sandboxed code.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)

	c := newConn(os.NewFile(initFDControl, "control"))
	in := &initState{c: c, procs: map[int]*initProc{}}
	if err := in.setup(); err != nil {
		_ = c.send(&message{Op: opFail, Error: err.Error()})
		os.Exit(1)
	}
	in.serve()
	os.Exit(0)
}

type initState struct {
	c       *conn
	setupM  *Setup
	bpfFD   int
	llFD    int
	mu      sync.Mutex // guards procs and makes fork+register atomic w.r.t. reaping
	procs   map[int]*initProc
	sendMu  sync.Mutex
	timings []Stage
	rlimits string // for the exec stage: "RES:CUR:MAX,..."
}

type initProc struct {
	id      uint64
	pid     int
	execErr chan execResult
}

type execResult struct {
	code int
	msg  string
}

func (in *initState) send(m *message, fds ...int) error {
	in.sendMu.Lock()
	defer in.sendMu.Unlock()
	return in.c.send(m, fds...)
}

func (in *initState) mark(name string, d time.Duration) {
	in.timings = append(in.timings, Stage{Name: name, Usec: d.Microseconds()})
}

func (in *initState) setup() error {
	m, fds, err := in.c.recv()
	if err != nil {
		return fmt.Errorf("receive setup: %w", err)
	}
	if m.Op != opSetup || m.Setup == nil {
		closeAll(fds)
		return fmt.Errorf("receive setup: unexpected %q message", m.Op)
	}
	s := m.Setup
	in.setupM = s
	in.rlimits = formatRlimits(s.Rlimits)
	in.bpfFD, in.llFD = -1, -1
	if s.Seccomp {
		if len(fds) != 1 {
			closeAll(fds)
			return fmt.Errorf("receive setup: seccomp program descriptor missing")
		}
		in.bpfFD = fds[0]
	} else {
		closeAll(fds)
	}
	timing := func(string, time.Duration) {}
	if s.Timing {
		timing = in.mark
	}
	t0 := time.Now()
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	timing("init.net", time.Since(t0))
	if err := mounts.Execute(s.Plan, timing); err != nil {
		return fmt.Errorf("build the sandbox's root filesystem: %w", err)
	}
	ready := &Ready{}
	if s.Landlock != nil {
		t0 = time.Now()
		fd, err := buildLandlock(s.Landlock, ready)
		if err != nil {
			return err
		}
		in.llFD = fd
		timing("init.landlock", time.Since(t0))
	}
	var netFDs []int
	if s.Proxy {
		t0 = time.Now()
		fds, err := proxySockets()
		if err != nil {
			return err
		}
		defer closeAll(fds)
		netFDs = fds
		timing("init.proxy-sockets", time.Since(t0))
	}
	go in.reap()
	return in.send(&message{Op: opReady, Ready: ready, Timing: in.timings}, netFDs...)
}

// loopbackUp brings up lo in the sandbox's fresh network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring up loopback: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: set flags: %w", err)
	}
	return nil
}

// proxySockets creates, inside the sandbox's network namespace, the HTTP
// proxy and SOCKS5 listeners and the DNS socket on 127.0.0.1. The
// supervisor serves them from the host side: a socket keeps the namespace
// it was made in, so no per-connection hop runs inside the sandbox.
func proxySockets() ([]int, error) {
	var fds []int
	mk := func(typ, port int, what string) error {
		fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s socket: %w", what, err)
		}
		fds = append(fds, fd)
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fmt.Errorf("%s socket: %w", what, err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return fmt.Errorf("%s socket: bind 127.0.0.1:%d: %w", what, port, err)
		}
		if typ == unix.SOCK_STREAM {
			if err := unix.Listen(fd, 128); err != nil {
				return fmt.Errorf("%s socket: listen: %w", what, err)
			}
		}
		return nil
	}
	for _, s := range []struct {
		typ, port int
		what      string
	}{{unix.SOCK_STREAM, ProxyHTTPPort, "HTTP proxy"}, {unix.SOCK_STREAM, ProxySOCKSPort, "SOCKS5 proxy"}, {unix.SOCK_DGRAM, DNSPort, "DNS"}} {
		if err := mk(s.typ, s.port, s.what); err != nil {
			closeAll(fds)
			return nil, err
		}
	}
	return fds, nil
}

// serve handles the supervisor's requests until it closes the socket.
func (in *initState) serve() {
	for {
		m, fds, err := in.c.recv()
		if err != nil {
			return // supervisor gone: exiting kills the sandbox
		}
		switch m.Op {
		case opSpawn:
			in.spawn(m, fds)
		case opSignal:
			closeAll(fds)
			in.signal(m.ID, syscall.Signal(m.Signal))
		default:
			closeAll(fds)
		}
	}
}

func (in *initState) signal(id uint64, sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for pid, p := range in.procs {
		if p.id == id {
			// pid is the command's reaper: it relays the signal to the
			// command's process group, or, for sigTerminate, kills the
			// command and everything it started.
			_ = unix.Kill(pid, sig)
		}
	}
}

func (in *initState) spawn(m *message, fds []int) {
	defer closeAll(fds)
	sp := m.Spawn
	fail := func(code int, msg string) {
		_ = in.send(&message{Op: opSpawnErr, ID: m.ID, Code: code, Error: msg})
	}
	if sp == nil || len(sp.Argv) == 0 || len(fds) < 3 || (sp.Notify && len(fds) < 4) {
		fail(125, "malformed spawn request")
		return
	}
	var pr [2]int
	if err := unix.Pipe2(pr[:], unix.O_CLOEXEC); err != nil {
		fail(125, "create status pipe: "+err.Error())
		return
	}
	files := []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2]), uintptr(pr[1]), ^uintptr(0), ^uintptr(0), ^uintptr(0)}
	if in.llFD >= 0 {
		files[execFDLandlock] = uintptr(in.llFD)
	}
	if in.bpfFD >= 0 {
		files[execFDSeccomp] = uintptr(in.bpfFD)
	}
	flags := "-"
	if sp.Notify && in.bpfFD >= 0 {
		files[execFDNotify] = uintptr(fds[3])
		flags += "n"
	}
	uid, gid := in.setupM.UID, in.setupM.GID
	attr := &syscall.ProcAttr{
		Dir:   "/",
		Env:   sp.Env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Cloneflags: syscall.CLONE_NEWUSER,
			// The nested user namespace maps the sandbox uid to the init's
			// uid 0, which is the invoking host user: inside, the command
			// is an ordinary uid with no capabilities after exec.
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: 0, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: 0, Size: 1}},
			GidMappingsEnableSetgroups: false,
			// Only so the exec stage can empty its own bounding set.
			AmbientCaps: []uintptr{unix.CAP_SETPCAP},
		},
	}
	argv := append([]string{execMagic, flags, in.rlimits, sp.Cwd, sp.Argv[0]}, sp.Argv...)
	in.mu.Lock()
	pid, err := syscall.ForkExec("/proc/self/exe", argv, attr)
	unix.Close(pr[1])
	if err != nil {
		in.mu.Unlock()
		unix.Close(pr[0])
		fail(125, "start the exec stage: "+err.Error())
		return
	}
	p := &initProc{id: m.ID, pid: pid, execErr: make(chan execResult, 1)}
	in.procs[pid] = p
	in.mu.Unlock()
	go readStatus(pr[0], p.execErr)
	_ = in.send(&message{Op: opStarted, ID: m.ID, Pid: pid})
}

func formatRlimits(rl []Rlimit) string {
	var b []byte
	for i, r := range rl {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r.Resource), 10)
		for _, v := range []uint64{r.Cur, r.Max} {
			b = append(b, ':')
			if v == ^uint64(0) {
				b = append(b, "-1"...)
			} else {
				b = strconv.AppendUint(b, v, 10)
			}
		}
	}
	return string(b)
}

// readStatus reads the exec stage's status pipe: EOF with no data means the
// command was executed.
func readStatus(fd int, out chan<- execResult) {
	defer unix.Close(fd)
	buf := make([]byte, 1024)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if k <= 0 || err != nil {
			break
		}
		n += k
	}
	if n == 0 {
		out <- execResult{}
		return
	}
	var code, eno int
	var what string
	if f := bytes.SplitN(buf[:n], []byte(" "), 3); len(f) == 3 {
		code, _ = strconv.Atoi(string(f[0]))
		eno, _ = strconv.Atoi(string(f[1]))
		what = string(f[2])
	}
	if code == 0 {
		code = 125
	}
	out <- execResult{code: code, msg: fmt.Sprintf("%s: %s", what, syscall.Errno(eno).Error())}
}

// reap collects every child of pid 1, reporting the commands it started.
func (in *initState) reap() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	for {
		for {
			var ws unix.WaitStatus
			in.mu.Lock()
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				in.mu.Unlock()
				continue
			}
			if pid <= 0 || err != nil {
				in.mu.Unlock()
				break
			}
			p := in.procs[pid]
			delete(in.procs, pid)
			in.mu.Unlock()
			if p != nil {
				res := <-p.execErr
				msg := &message{Op: opExit, ID: p.id, Status: int(ws)}
				if res.code != 0 {
					msg.Code, msg.Error = res.code, res.msg
				}
				_ = in.send(msg)
			}
		}
		<-ch
	}
}
