package nsjail

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/landlock"
)

// A session's commands after its first start from a spawner (init.c's
// start_spawner, execstage.c's hutch_harden): the restrictions every
// command shares are applied once, so a command no longer pays for loading
// the seccomp filter (the kernel checks, converts and compiles it each
// time). The spawner's commands share its seccomp listener, so a
// notification is attributed to a command by the caller's ancestry: every
// process of a command descends from the command's reaper (a child
// subreaper); see CommandOf.
//
// Config.Spawner says whether the plan allows one (plan.Process): only
// where it changes nothing a command can observe or do. A one-command
// sandbox (hutch run) never starts one: it would gain nothing.

type spawnerState int

const (
	spawnerUnknown spawnerState = iota // not tried yet
	spawnerReady
	spawnerOff
)

// spawnerGate decides, once per sandbox, whether commands go through a
// spawner.
type spawnerGate struct {
	mu    sync.Mutex
	state spawnerState
	execs int
}

// useSpawner reports whether this command should start from the spawner,
// starting it at the sandbox's second command.
func (s *Sandbox) useSpawner() bool {
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
	if !s.cfg.Spawner {
		g.state = spawnerOff
		return false
	}
	if g.execs < 2 {
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

func (s *Sandbox) startSpawner() error {
	scope, err := landlock.ScopeRuleset()
	if err != nil {
		return err
	}
	defer unix.Close(scope)
	var child *os.File
	if s.cfg.Listener != nil {
		if child, err = s.cfg.Listener(nil); err != nil {
			return err
		}
		if child != nil {
			defer child.Close()
		}
	}
	return s.requestSpawner(scope, child)
}

// spawnerGone is called when a command through the spawner could not start
// because the spawner is gone: later commands start without it.
func (s *Sandbox) spawnerGone() {
	s.spawner.mu.Lock()
	s.spawner.state = spawnerOff
	s.spawner.mu.Unlock()
	s.debug("the spawner is gone; commands start without it")
}

func (s *Sandbox) debug(msg string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Debug(msg, args...)
	}
}

// CommandOf returns the command a thread belongs to, from its host thread id
// tid: the command whose reaper is the thread's nearest such ancestor; nil
// when there is none (its command's reaper was killed by the command itself
// and the init adopted it: then it belongs to no command, never to whichever
// command happens to be running). It is meant for a seccomp notification,
// while the caller waits for its answer (so it and its ancestors exist).
func (s *Sandbox) CommandOf(tid uint32) *Process {
	for attempt := 0; attempt < 2; attempt++ {
		started := map[int]*Process{}
		var pending []*Process
		s.mu.Lock()
		for _, p := range s.procs {
			select {
			case <-p.started:
				started[p.Pid] = p
			default:
				pending = append(pending, p)
			}
		}
		s.mu.Unlock()
		if p := findAncestor(int(tid), started); p != nil {
			return p
		}
		if len(pending) == 0 || attempt > 0 {
			break
		}
		// Commands whose reaper pids the init has not reported: ask (it
		// reports those from the spawner only when asked), wait a little,
		// then look again.
		if err := s.RequestPids(); err != nil {
			break
		}
		// One deadline for all (its channel fires once: a second wait on it
		// would last until that command ended, holding the notification).
		deadline := time.NewTimer(100 * time.Millisecond)
	wait:
		for _, p := range pending {
			select {
			case <-p.started:
			case <-deadline.C:
				break wait
			}
		}
		deadline.Stop()
	}
	return nil
}

// findAncestor walks from host pid up through its parents and returns the
// value of the first whose pid in the sandbox (the last NSpid field) is a
// key of reapers.
func findAncestor[T any](pid int, reapers map[int]T) T {
	var none T
	for i := 0; i < 64 && pid > 1; i++ {
		nsPid, ppid, ok := procStatusPids(pid)
		if !ok {
			return none
		}
		if v, ok := reapers[nsPid]; ok {
			return v
		}
		if nsPid == 1 {
			return none // the sandbox's init: no command above
		}
		pid = ppid
	}
	return none
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
