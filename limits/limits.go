// Package limits enforces a sandbox's resources on this host, as its plan
// says (plan.Resources): a cgroup where the host gives one, else rlimits in
// the sandbox and a watchdog of its processes' memory and number
// (plan.Watchdog); and words what a command hit (memory, processes, file
// size, CPU time) as security events.
package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/seclog"
)

// Sandbox is how one sandbox's resources are enforced.
type Sandbox struct {
	res     plan.Resources
	cg      cgroup.Cgroup // nil: rlimits only
	backend string
	reason  string // why no cgroup, when cg is nil
	rlimits []cgroup.Rlimit
	logger  *slog.Logger
	// watchdog watches memory and processes on the rlimit backend (Watch
	// starts it); nil on a cgroup, or before Watch, or with neither limit.
	watchdog *watchdog
	// errOnce reports the watchdog's failure to start, once.
	errOnce sync.Once
}

// Events are what a sandbox's limits recorded: its cgroup's counters, or on
// the rlimit backend its watchdog's (OOMKills are the processes it killed,
// MemoryPeak the highest total it measured when it measured precisely).
type Events struct {
	cgroup.Events
	// PidsReached is the number of the watchdog's looks that found a user
	// namespace of the sandbox at RLIMIT_NPROC, where fork fails.
	PidsReached uint64 `json:"pids_reached,omitempty"`
}

// Setup makes the sandbox's cgroup when its plan has one (named after id),
// else, or when the cgroup cannot be made, falls back to rlimits. With
// strict, a fallback is an error that names what cannot be enforced.
func Setup(ctx context.Context, r plan.Resources, id string, strict bool, logger *slog.Logger) (*Sandbox, error) {
	l := &Sandbox{res: r, backend: r.Backend, rlimits: r.Rlimits, logger: logger}
	if r.Cgroup != nil {
		cg, err := cgroup.New(ctx, id, *r.Cgroup, cgroup.Options{})
		if err == nil {
			l.cg, l.backend = cg, cg.Backend()
			// Only where this user can make cgroups can a killed hutch have
			// left some behind; elsewhere the scan would be wasted start-up.
			if removed, err := cgroup.ReapStale(ctx); err == nil && len(removed) > 0 && logger != nil {
				logger.Debug("removed stale sandbox cgroups", "cgroups", removed)
			}
			return l, nil
		}
		if !errors.Is(err, cgroup.ErrUnavailable) && !errors.Is(err, cgroup.ErrControllerMissing) {
			return nil, fmt.Errorf("create the sandbox's cgroup: %w", err)
		}
		if strict {
			return nil, fmt.Errorf("enforcement = \"strict\": resources.memory, resources.pids and resources.cpus cannot be enforced here (there are only per-process rlimits, a sampling memory watchdog and no cpu limit): %w", err)
		}
		l.reason = err.Error()
	} else {
		l.reason = r.BackendReason
	}
	l.backend = cgroup.BackendRlimit
	for _, rl := range r.Fallback {
		if rl.Resource == unix.RLIMIT_NOFILE || rl.Resource == unix.RLIMIT_FSIZE {
			continue // set on every backend
		}
		l.rlimits = append(l.rlimits, rl)
	}
	return l, nil
}

// Cgroup is the sandbox's cgroup, nil on the rlimit backend.
func (l *Sandbox) Cgroup() cgroup.Cgroup {
	if l == nil {
		return nil
	}
	return l.cg
}

// Rlimits are the limits every command gets.
func (l *Sandbox) Rlimits() []cgroup.Rlimit { return l.rlimits }

// Backend is the backend in use (cgroup.Backend*).
func (l *Sandbox) Backend() string { return l.backend }

// FallbackReason says why there is no cgroup, "" when there is one.
func (l *Sandbox) FallbackReason() string {
	if l.cg != nil {
		return ""
	}
	return l.reason
}

// Watch starts the watchdog of the sandbox whose init has host pid
// initPid, on the rlimit backend when the plan limits memory or processes
// (plan.Resources.Watchdog); elsewhere it does nothing. The sandbox's /proc
// must be mounted (the init is configured). Close stops it.
func (l *Sandbox) Watch(initPid int) {
	if l == nil || l.cg != nil || l.res.Watchdog == nil || l.watchdog != nil {
		return
	}
	l.watchdog = newWatchdog(*l.res.Watchdog, func() (*os.File, error) { return openSandboxProc(initPid) }, l.logger)
}

func noop() {}

// Busy marks a command running until done is called; the watchdog looks
// more often meanwhile (plan.Watchdog's Interval).
func (l *Sandbox) Busy() (done func()) {
	if l == nil || l.watchdog == nil {
		return noop
	}
	return l.watchdog.Busy()
}

// Left records how many processes a command left behind
// (nsjail.ExitInfo.Leftover), which its reaper killed when it ended. On
// the rlimit backend a tree at RLIMIT_NPROC then means the limit refused
// forks, which no counter records: a fork bomb that collapsed between two
// of the watchdog's looks. The cgroup backends count those refusals
// themselves.
func (l *Sandbox) Left(n int) {
	if l == nil || l.watchdog == nil {
		return
	}
	l.watchdog.left(n)
}

// Events reads the cgroup's counters, or the watchdog's (zero with
// neither).
func (l *Sandbox) Events() Events {
	switch {
	case l == nil:
		return Events{}
	case l.cg != nil:
		e, _ := l.cg.Events()
		return Events{Events: e}
	case l.watchdog != nil:
		return l.watchdog.Events()
	}
	return Events{}
}

// Report turns what a command's run added to the counters, and how it
// ended, into security events on rec (which the run's summary then lists).
func (l *Sandbox) Report(before, after Events, status unix.WaitStatus, rec *seclog.Recorder) {
	user := l.res.Limits
	d := cgroup.Events{
		OOMKills:         after.OOMKills - before.OOMKills,
		PidsMaxHits:      after.PidsMaxHits - before.PidsMaxHits,
		CPUThrottled:     after.CPUThrottled - before.CPUThrottled,
		CPUThrottledUsec: after.CPUThrottledUsec - before.CPUThrottledUsec,
	}
	if w := l.watchdog; w != nil {
		if err := w.Err(); err != nil {
			l.errOnce.Do(func() {
				rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources.memory", Subject: "watchdog",
					Message: "memory limit not enforced and process limit not reported: hutch cannot watch the sandbox's processes (" + err.Error() + "); a cgroup would enforce them: see hutch doctor", Level: slog.LevelWarn,
					Detail: map[string]any{"backend": l.backend}})
			})
		}
	}
	if note := d.CPUNote(user); note != "" {
		// Throttling slows a command down but stops nothing: logged, not
		// summarized.
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources.cpus", Subject: "cpu throttled",
			Message: strings.TrimPrefix(note, "hutch: "), Level: slog.LevelInfo,
			Detail: map[string]any{"backend": l.backend, "throttled_periods": d.CPUThrottled, "throttled_usec": d.CPUThrottledUsec}})
	}
	msgs := d.Messages(user)
	if after.PidsReached > before.PidsReached {
		lim := "process limit"
		if user.Pids > 0 {
			lim += fmt.Sprintf(" %d", user.Pids)
		}
		msgs = append(msgs, "hutch: "+lim+" reached: forks beyond it fail")
	}
	for _, m := range msgs {
		kind, subject := "memory", cgroup.FormatBytes(user.MemoryBytes)
		if strings.Contains(m, "process limit") {
			kind, subject = "pids", fmt.Sprint(user.Pids)
			if l.res.Shared {
				m += " (the session's commands share the limit)"
			}
		}
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources." + kind, Subject: kind + " " + subject,
			Message: strings.TrimPrefix(m, "hutch: "), Level: slog.LevelWarn,
			Detail: l.detail(d, after)})
	}
	var m, rule string
	fileSize := l.res.FileSize
	switch {
	case status.Signaled() && status.Signal() == unix.SIGXFSZ:
		m, rule = fmt.Sprintf("killed: file size limit %s exceeded (SIGXFSZ); raise resources.file_size", fileSize), "resources.file_size"
	case status.Signaled() && status.Signal() == unix.SIGXCPU:
		m, rule = "killed: CPU time limit exceeded (SIGXCPU)", "resources.cpus"
	case status.Exited() && status.ExitStatus() == 128+int(unix.SIGXFSZ):
		m, rule = fmt.Sprintf("exit status 153 is how shells report a process killed by SIGXFSZ: a file probably exceeded the file size limit %s (resources.file_size)", fileSize), "resources.file_size"
	case status.Exited() && status.ExitStatus() == 128+int(unix.SIGXCPU) && l.cg == nil:
		m, rule = "exit status 152 is how shells report a process killed by SIGXCPU: the CPU time limit was probably exceeded", "resources.cpus"
	}
	if m != "" {
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: rule, Subject: rule, Message: m, Level: slog.LevelWarn})
	}
}

// detail is a limit event's detail: the counters that made it.
func (l *Sandbox) detail(d cgroup.Events, after Events) map[string]any {
	m := map[string]any{"backend": l.backend, "oom_kills": d.OOMKills, "forks_refused": d.PidsMaxHits, "memory_peak": after.MemoryPeak}
	if w := l.res.Watchdog; l.watchdog != nil {
		// The watchdog's: processes it killed, the highest total it
		// measured, how often it looks; forks refused are not known.
		delete(m, "forks_refused")
		m["enforced_by"], m["interval"], m["rlimit_nproc"] = "watchdog", w.Interval.String(), w.Nproc
	}
	return m
}

// Close stops the watchdog, kills what is left in the cgroup and removes
// it.
func (l *Sandbox) Close() {
	if l == nil {
		return
	}
	if l.watchdog != nil {
		l.watchdog.Close()
	}
	if l.cg == nil {
		return
	}
	_ = l.cg.Kill()
	_ = l.cg.Remove()
}
