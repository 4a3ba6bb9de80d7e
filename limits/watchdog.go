package limits

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/plan"
)

// lookBudget bounds the watchdog's own CPU use: the time between two looks
// is at least lookBudget times what the last look took (2% of a CPU at
// most, however many processes the sandbox holds).
const lookBudget = 50

// watchdog enforces plan.Watchdog: the rlimit backend's memory limit and
// its record of the process limit. It reads the sandbox's own procfs (its
// /proc, through the init's root: the init and every process of the sandbox
// belong to the supervisor's user, in user namespaces it owns), which lists
// exactly the processes of the sandbox's pid namespace and of the ones
// nested in it, so nothing in the sandbox is missed or outside counted.
//
// Each look reads every process's status (RssAnon, RssShmem, VmSwap,
// Threads). Their sum bounds the memory from above, so only when it exceeds
// the limit does the look measure precisely: the proportional set size of
// each process's anonymous and shared memory and swap (smaps_rollup), in
// which a page that processes share after a fork counts once, divided
// between them. When that total exceeds the limit the largest processes
// are SIGKILLed until the rest fit, as the OOM killer does in a cgroup (the
// init, pid 1, excepted). Likewise, only when the sandbox's threads reach
// RLIMIT_NPROC are they counted per user namespace (RLIMIT_NPROC's count).
type watchdog struct {
	cfg    plan.Watchdog
	logger *slog.Logger
	// kill SIGKILLs the process of a /proc/PID directory descriptor.
	kill func(dirfd int) error

	proc *os.File // the sandbox's procfs; nil when it could not be opened

	started chan struct{} // closed once proc is open, or err set
	err     error         // why the sandbox's processes cannot be watched
	wake    chan struct{} // a command started: look soon
	stop    chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	ev     Events
	busy   int
	killed map[int]uint64 // pid (in the sandbox) -> start time: killed, maybe still exiting

	// Buffers of the watchdog's goroutine, reused from look to look.
	dents  [16 << 10]byte
	pidBuf []int
}

// newWatchdog starts watching the sandbox whose init has host pid initPid.
// open opens the sandbox's procfs.
func newWatchdog(cfg plan.Watchdog, open func() (*os.File, error), logger *slog.Logger) *watchdog {
	w := &watchdog{cfg: cfg, logger: logger, kill: killDirfd,
		started: make(chan struct{}), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		killed: map[int]uint64{}}
	go w.run(open)
	return w
}

func killDirfd(dirfd int) error { return unix.PidfdSendSignal(dirfd, unix.SIGKILL, nil, 0) }

// openSandboxProc opens the procfs the init of host pid initPid mounted at
// the sandbox's /proc, and checks that its pid 1 is that init.
func openSandboxProc(initPid int) (*os.File, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/root/proc", initPid), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's /proc: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != unix.PROC_SUPER_MAGIC {
		f.Close()
		return nil, fmt.Errorf("the sandbox's /proc is not a procfs (statfs: %v)", err)
	}
	want, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPid))
	got, err2 := readlinkat(int(f.Fd()), "1/ns/pid")
	if err := errors.Join(err1, err2); err != nil || got != want {
		f.Close()
		return nil, fmt.Errorf("the sandbox's /proc is not its pid namespace's (pid 1 in %q, the init in %q): %v", got, want, err)
	}
	return f, nil
}

func (w *watchdog) run(open func() (*os.File, error)) {
	defer close(w.done)
	w.proc, w.err = open()
	close(w.started)
	if w.err != nil {
		if w.logger != nil {
			w.logger.Warn("memory and process watchdog not running", "error", w.err)
		}
		return
	}
	defer w.proc.Close()
	due := time.Now().Add(w.cfg.IdleInterval.D())
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.wake:
			// The first look comes an interval after a command starts (a
			// command that ends sooner costs no look), or sooner if one was
			// due sooner: commands in quick succession never put it off.
			if soon := time.Now().Add(w.cfg.Interval.D()); soon.Before(due) {
				due = soon
				t.Reset(time.Until(due))
			}
			continue
		case <-t.C:
		}
		cpu := w.timedLook()
		w.mu.Lock()
		next := w.cfg.IdleInterval.D()
		if w.busy > 0 {
			next = w.cfg.Interval.D()
		}
		w.mu.Unlock()
		due = time.Now().Add(max(next, lookBudget*cpu))
		t.Reset(time.Until(due))
	}
}

// timedLook looks and returns the CPU time the look took (its thread's, not
// the wall clock, which a busy machine stretches).
func (w *watchdog) timedLook() time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a)
	w.look()
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b)
	return time.Duration(b.Nano() - a.Nano())
}

// Busy marks a command running until done is called: the watchdog looks
// every Interval instead of every IdleInterval.
func (w *watchdog) Busy() (done func()) {
	w.mu.Lock()
	w.busy++
	first := w.busy == 1
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return func() {
		w.mu.Lock()
		w.busy--
		w.mu.Unlock()
	}
}

// Events are the watchdog's counters so far.
func (w *watchdog) Events() Events {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ev
}

// Err waits until the watchdog has started and says why it cannot watch
// (nil when it can).
func (w *watchdog) Err() error {
	<-w.started
	return w.err
}

// Close stops the watchdog.
func (w *watchdog) Close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// procInfo is one process of the sandbox as a look saw it.
type procInfo struct {
	pid     int // in the sandbox's pid namespace
	threads int64
	mem     int64 // bytes: first status's upper bound, then smaps_rollup's
}

// look measures the sandbox once and acts on what it finds.
func (w *watchdog) look() {
	names, err := w.pids()
	if err != nil {
		return
	}
	procs := make([]procInfo, 0, len(names))
	var mem, threads int64
	buf := make([]byte, 8192)
	for _, pid := range names {
		p, ok := w.status(pid, buf)
		if !ok {
			continue // gone
		}
		procs = append(procs, p)
		mem += p.mem
		threads += p.threads
	}
	if w.cfg.MemoryBytes > 0 && mem > w.cfg.MemoryBytes {
		w.enforceMemory(procs, buf)
	}
	if w.cfg.Nproc > 0 && threads >= w.cfg.Nproc {
		w.checkNproc(procs)
	}
	w.mu.Lock()
	killed := maps.Clone(w.killed)
	w.mu.Unlock()
	for pid, start := range killed {
		if s, ok := w.startTime(pid, buf); !ok || s != start {
			w.mu.Lock()
			delete(w.killed, pid) // gone (or the pid is another process's now)
			w.mu.Unlock()
		}
	}
}

// pids lists the sandbox's processes (their pids in the sandbox), in a
// slice reused by the next call.
func (w *watchdog) pids() ([]int, error) {
	fd := int(w.proc.Fd())
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	w.pidBuf = w.pidBuf[:0]
	for {
		n, err := unix.Getdents(fd, w.dents[:])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return w.pidBuf, nil
		}
		// struct linux_dirent64: d_ino, d_off (8 bytes each), d_reclen
		// (2), d_type (1), d_name (NUL-terminated).
		for b := w.dents[:n]; len(b) > 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 20 || reclen > len(b) {
				break
			}
			pid := 0
			for _, c := range b[19:reclen] {
				if c < '0' || c > '9' {
					if c != 0 {
						pid = 0
					}
					break
				}
				pid = pid*10 + int(c-'0')
			}
			if pid > 0 {
				w.pidBuf = append(w.pidBuf, pid)
			}
			b = b[reclen:]
		}
	}
}

// status reads a process's status: its threads, and RssAnon + RssShmem +
// VmSwap, which is at least its share of the proportional set size that
// smaps_rollup gives.
func (w *watchdog) status(pid int, buf []byte) (procInfo, bool) {
	b, ok := readAt(int(w.proc.Fd()), strconv.Itoa(pid)+"/status", buf)
	if !ok {
		return procInfo{}, false
	}
	p := procInfo{pid: pid}
	p.mem, p.threads = parseStatus(b)
	return p, true
}

// parseStatus returns RssAnon + RssShmem + VmSwap in bytes and Threads from
// /proc/PID/status.
func parseStatus(b []byte) (mem, threads int64) {
	fields(b, func(k, v []byte) {
		switch string(k) {
		case "RssAnon", "RssShmem", "VmSwap":
			mem += kB(v)
		case "Threads":
			threads, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	})
	return mem, threads
}

// fields calls f with the key and the value of each "Key: value" line of b.
func fields(b []byte, f func(k, v []byte)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok {
			f(k, v)
		}
	}
}

// parseRollup returns a process's proportional set size of anonymous and
// shared memory and of swap, in bytes, from /proc/PID/smaps_rollup: Pss_Anon
// + Pss_Shmem + SwapPss, or, before Linux 5.10 (no Pss_Anon), Pss + SwapPss
// (which counts its file pages too).
func parseRollup(b []byte) (int64, bool) {
	var pss, anon, shmem, swap int64
	var split, any bool
	fields(b, func(k, v []byte) {
		switch string(k) {
		case "Pss":
			pss, any = kB(v), true
		case "Pss_Anon":
			anon, split = kB(v), true
		case "Pss_Shmem":
			shmem = kB(v)
		case "SwapPss":
			swap = kB(v)
		}
	})
	if split {
		return anon + shmem + swap, true
	}
	return pss + swap, any
}

// kB parses "  1234 kB" into bytes.
func kB(v []byte) int64 {
	v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n << 10
}

// enforceMemory measures precisely (smaps_rollup) and kills the largest
// processes until the rest fit in the limit. Processes killed before and
// still exiting are neither counted nor killed again.
func (w *watchdog) enforceMemory(procs []procInfo, buf []byte) {
	w.mu.Lock()
	killed := maps.Clone(w.killed)
	w.mu.Unlock()
	type cand struct {
		pid   int
		start uint64
		mem   int64
	}
	var cands []cand
	var total int64
	for _, p := range procs {
		start, ok := w.startTime(p.pid, buf)
		if !ok {
			continue
		}
		if s, dying := killed[p.pid]; dying && s == start {
			continue
		}
		b, ok := readAt(int(w.proc.Fd()), strconv.Itoa(p.pid)+"/smaps_rollup", buf)
		mem, ok2 := parseRollup(b)
		if !ok || !ok2 {
			mem = p.mem // no smaps_rollup (Linux < 4.14), or a zombie
		}
		total += mem
		cands = append(cands, cand{p.pid, start, mem})
	}
	w.mu.Lock()
	w.ev.MemoryPeak = max(w.ev.MemoryPeak, uint64(total))
	w.mu.Unlock()
	if total <= w.cfg.MemoryBytes {
		return
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.mem, a.mem) })
	for _, c := range cands {
		if total <= w.cfg.MemoryBytes {
			break
		}
		if c.pid == 1 {
			continue // the init: the sandbox itself
		}
		if w.killOne(c.pid, c.start, buf) {
			total -= c.mem
			if w.logger != nil {
				w.logger.Debug("memory watchdog killed a process", "pid", c.pid, "bytes", c.mem, "limit", w.cfg.MemoryBytes)
			}
		}
	}
}

// killOne SIGKILLs the sandbox's process pid if it is still the one that
// started at start: the directory descriptor holds the process, so the
// signal cannot reach another that reused its pid. It is counted before it
// is sent, so that the command's end never comes before its record.
func (w *watchdog) killOne(pid int, start uint64, buf []byte) bool {
	fd, err := unix.Openat(int(w.proc.Fd()), strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	b, ok := readAt(fd, "stat", buf)
	if s, ok2 := parseStartTime(b); !ok || !ok2 || s != start {
		return false
	}
	w.mu.Lock()
	w.ev.OOMKills++
	w.killed[pid] = start
	w.mu.Unlock()
	if err := w.kill(fd); err != nil {
		w.mu.Lock()
		w.ev.OOMKills--
		delete(w.killed, pid)
		w.mu.Unlock()
		return false
	}
	return true
}

// checkNproc counts what RLIMIT_NPROC counts, the threads of the commands'
// user namespace (the init, pid 1, is outside it), and records a look at
// which it has reached the limit. With PerNamespace (a session's first
// command and its later ones have a namespace each) they are counted per
// user namespace.
func (w *watchdog) checkNproc(procs []procInfo) {
	reached := false
	if !w.cfg.PerNamespace {
		var n int64
		for _, p := range procs {
			if p.pid != 1 {
				n += p.threads
			}
		}
		reached = n >= w.cfg.Nproc
	} else {
		perNS := map[string]int64{}
		for _, p := range procs {
			ns, err := readlinkat(int(w.proc.Fd()), strconv.Itoa(p.pid)+"/ns/user")
			if err != nil {
				continue
			}
			perNS[ns] += p.threads
			if perNS[ns] >= w.cfg.Nproc {
				reached = true
				break
			}
		}
	}
	if reached {
		w.mu.Lock()
		w.ev.PidsReached++
		w.mu.Unlock()
	}
}

// leftSlack are the processes of a command's tree that kill_all does not
// count: the command itself, which had ended, and its reaper.
const leftSlack = 2

// left counts a command's leftover tree at RLIMIT_NPROC as the limit
// reached (Sandbox.Left).
func (w *watchdog) left(n int) {
	if w.cfg.Nproc <= 0 || int64(n)+leftSlack < w.cfg.Nproc {
		return
	}
	w.mu.Lock()
	w.ev.PidsReached++
	w.mu.Unlock()
}

// startTime is field 22 of the process's stat: when it started, in clock
// ticks since boot; with its pid, it names one process.
func (w *watchdog) startTime(pid int, buf []byte) (uint64, bool) {
	b, ok := readAt(int(w.proc.Fd()), strconv.Itoa(pid)+"/stat", buf)
	if !ok {
		return 0, false
	}
	return parseStartTime(b)
}

// parseStartTime reads field 22 of /proc/PID/stat. The command name (field
// 2) may hold spaces and parentheses: fields are counted after its last ')'.
func parseStartTime(b []byte) (uint64, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:]) // field 3 onwards
	if len(f) < 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[19]), 10, 64)
	return n, err == nil
}

// readAt reads the file at path below directory descriptor dir into buf
// (procfs files are read whole in one read when they fit).
func readAt(dir int, path string, buf []byte) ([]byte, bool) {
	fd, err := unix.Openat(dir, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return nil, false
	}
	return buf[:n], true
}

func readlinkat(dir int, path string) (string, error) {
	var b [64]byte
	n, err := unix.Readlinkat(dir, path, b[:])
	if err != nil {
		return "", err
	}
	return string(b[:n]), nil
}
