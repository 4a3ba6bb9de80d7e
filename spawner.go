package hutch

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/seclog"
)

// A session's commands after its first start from a spawner (nsjail's
// StartSpawner, execstage.c): the restrictions every command shares are
// applied once, so a command no longer pays for loading the seccomp filter
// (the kernel checks, converts and compiles it each time). The spawner's
// commands share its seccomp listener, so a notification is attributed to a
// command by the caller's ancestry: every process of a command descends from
// the command's reaper (a child subreaper).
//
// The spawner is used only where it changes nothing a command can observe
// or do: the built-in seccomp profile (which allows everything the
// spawner's forks need, so a strict custom profile never turns them into
// denials), and a kernel whose Landlock scopes signals (ABI 6), so that no
// command can signal the spawner or another command. HUTCH_NO_SPAWNER=1
// turns it off.

type spawnerState int

const (
	spawnerUnknown spawnerState = iota // not tried yet
	spawnerReady
	spawnerOff
)

// spawnerGate decides, once per session, whether commands go through a
// spawner, and tracks the commands that do.
type spawnerGate struct {
	mu     sync.Mutex
	state  spawnerState
	execs  int
	cancel context.CancelFunc

	cmdMu sync.Mutex
	cmds  map[*nsjail.Process]*seclog.Recorder
}

// useSpawner reports whether this command should start from the spawner,
// starting it at the session's second command.
func (s *Session) useSpawner() bool {
	g := &s.spawner
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case spawnerReady:
		return true
	case spawnerOff:
		return false
	}
	g.execs++
	if g.execs < 2 {
		return false // a one-command sandbox (hutch run) gains nothing
	}
	if why := s.spawnerUnusable(); why != "" {
		g.state = spawnerOff
		s.debug("commands start without a spawner", "reason", why)
		return false
	}
	if err := s.startSpawner(); err != nil {
		g.state = spawnerOff
		s.debug("commands start without a spawner", "reason", err.Error())
		return false
	}
	g.state = spawnerReady
	s.debug("spawner started: later commands inherit the shared restrictions")
	return true
}

// spawnerUnusable says why this session cannot use a spawner, or "".
func (s *Session) spawnerUnusable() string {
	if v := os.Getenv("HUTCH_NO_SPAWNER"); v != "" && v != "0" {
		return "HUTCH_NO_SPAWNER is set"
	}
	if s.filter != nil && s.filter.BPF != nil && s.prof != "default" {
		return "a custom seccomp profile might deny the spawner's own calls"
	}
	r := s.sb.Ready
	if r == nil || r.LandlockABI < 6 || !s.scopesSignals {
		return "Landlock does not scope signals here (ABI 6 needed), so commands could signal the spawner"
	}
	return ""
}

func (s *Session) startSpawner() error {
	scope, err := landlock.ScopeRuleset()
	if err != nil {
		return err
	}
	defer unix.Close(scope)
	var child *os.File
	if s.filter != nil && s.filter.BPF != nil && s.filter.Notify {
		mine, c, err := notifyPair()
		if err != nil {
			return err
		}
		child = c
		defer child.Close()
		ctx, cancel := context.WithCancel(context.Background())
		s.spawner.cancel = cancel
		go serveSeccomp(ctx, mine, s.filter, s.prof, s.recorderFor)
	}
	if err := s.sb.StartSpawner(scope, child); err != nil {
		if s.spawner.cancel != nil {
			s.spawner.cancel()
		}
		return err
	}
	return nil
}

// spawnerGone is called when a command through the spawner could not start
// because the spawner is gone: later commands start without it.
func (s *Session) spawnerGone() {
	s.spawner.mu.Lock()
	s.spawner.state = spawnerOff
	s.spawner.mu.Unlock()
	s.debug("the spawner is gone; commands start without it")
}

// stopSpawner ends the spawner's notification server (at Close).
func (s *Session) stopSpawner() {
	s.spawner.mu.Lock()
	defer s.spawner.mu.Unlock()
	if s.spawner.cancel != nil {
		s.spawner.cancel()
	}
}

// track and untrack keep the commands that share the spawner's listener.
func (s *Session) track(p *nsjail.Process, rec *seclog.Recorder) {
	g := &s.spawner
	g.cmdMu.Lock()
	if g.cmds == nil {
		g.cmds = map[*nsjail.Process]*seclog.Recorder{}
	}
	g.cmds[p] = rec
	g.cmdMu.Unlock()
}

func (s *Session) untrack(p *nsjail.Process) {
	if p == nil {
		return
	}
	g := &s.spawner
	g.cmdMu.Lock()
	delete(g.cmds, p)
	g.cmdMu.Unlock()
}

// recorderFor attributes a notification from host thread id tid to the
// command it belongs to: the one whose reaper is an ancestor. A process
// with no such ancestor (its command's reaper was killed by the command
// itself, and the init adopted it) is recorded for the session, never for
// whichever command happens to be running.
func (s *Session) recorderFor(tid uint32) *seclog.Recorder {
	for attempt := 0; attempt < 2; attempt++ {
		g := &s.spawner
		g.cmdMu.Lock()
		started := map[int]*seclog.Recorder{}
		var pending []*nsjail.Process
		for p, rec := range g.cmds {
			select {
			case <-p.Started():
				started[p.Pid] = rec
			default:
				pending = append(pending, p)
			}
		}
		g.cmdMu.Unlock()
		if rec := findAncestor(int(tid), started); rec != nil {
			return rec
		}
		if len(pending) == 0 || attempt > 0 {
			break
		}
		// Commands whose reaper pids the init has not reported: ask (it
		// reports those from the spawner only when asked), wait a little,
		// then look again.
		if err := s.sb.RequestPids(); err != nil {
			break
		}
		// One deadline for all (its channel fires once: a second wait on it
		// would last until that command ended, holding the notification).
		deadline := time.NewTimer(100 * time.Millisecond)
	wait:
		for _, p := range pending {
			select {
			case <-p.Started():
			case <-deadline.C:
				break wait
			}
		}
		deadline.Stop()
	}
	return s.rec
}

// findAncestor walks from host pid up through its parents and returns the
// recorder of the first whose pid in the sandbox (the last NSpid field) is
// a known reaper.
func findAncestor(pid int, reapers map[int]*seclog.Recorder) *seclog.Recorder {
	for i := 0; i < 64 && pid > 1; i++ {
		nsPid, ppid, ok := procStatusPids(pid)
		if !ok {
			return nil
		}
		if rec, ok := reapers[nsPid]; ok {
			return rec
		}
		if nsPid == 1 {
			return nil // the sandbox's init: no command above
		}
		pid = ppid
	}
	return nil
}

// procStatusPids reads a process's pid in its innermost pid namespace
// (NSpid's last field) and its parent's pid as seen from here.
func procStatusPids(pid int) (nsPid, ppid int, ok bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := 0
	for sc.Scan() && found < 2 {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "PPid:"):
			ppid, _ = strconv.Atoi(strings.TrimSpace(line[5:]))
			found++
		case strings.HasPrefix(line, "NSpid:"):
			fs := strings.Fields(line[6:])
			if len(fs) > 0 {
				nsPid, _ = strconv.Atoi(fs[len(fs)-1])
			}
			found++
		}
	}
	return nsPid, ppid, found == 2
}

func (s *Session) debug(msg string, args ...any) {
	if s.o.Logger != nil {
		s.o.Logger.Debug(msg, args...)
	}
}
