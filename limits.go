package hutch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// pidsMargin is added to the policy's pids limit for hutch's own processes
// inside the sandbox's cgroup: the init (one single-threaded C task), one
// reaper per running command and, once per session, a short-lived helper
// that makes the commands' user namespace. 16 leaves room for a dozen
// concurrent session commands; see docs/RESOURCES.md.
const pidsMargin = 16

// limits is how one sandbox's RESOURCES are enforced on this host.
type limits struct {
	user    cgroup.Limits // what the policy asks for
	cg      cgroup.Cgroup // nil: rlimits only
	backend string
	reason  string // why no cgroup, when cg is nil
	rlimits []nsjail.Rlimit
}

// setupLimits picks the backend: a cgroup (v2 delegated or as root, v1 as
// root) when this host gives one, else rlimits inside the sandbox. With
// enforcement = "strict", a limit that no backend can enforce is an error
// that names it and the fix.
func setupLimits(ctx context.Context, p *policy.Policy, id string, logger *slog.Logger) (*limits, error) {
	l := &limits{user: cgroup.Limits{
		MemoryBytes: int64(p.Resources.Memory),
		Pids:        int64(p.Resources.Pids),
		CPUs:        p.Resources.CPUs,
	}}
	withMargin := l.user
	if withMargin.Pids > 0 {
		withMargin.Pids += pidsMargin
	}
	cg, err := cgroup.New(ctx, id, withMargin, cgroup.Options{})
	// File size and open files are per-process limits on every backend.
	l.rlimits = append(l.rlimits,
		nsjail.Rlimit{Resource: unix.RLIMIT_NOFILE, Cur: uint64(p.Resources.OpenFiles), Max: uint64(p.Resources.OpenFiles)},
		nsjail.Rlimit{Resource: unix.RLIMIT_FSIZE, Cur: uint64(p.Resources.FileSize), Max: uint64(p.Resources.FileSize)},
		nsjail.Rlimit{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
	)
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
	l.backend, l.reason = cgroup.BackendRlimit, err.Error()
	if p.Enforcement == policy.EnforceStrict {
		return nil, fmt.Errorf("enforcement = \"strict\": resources.memory, resources.pids and resources.cpus cannot be enforced here (only per-process rlimits are available): %w", err)
	}
	for _, r := range cgroup.Rlimits(l.user, 0, 0) {
		if r.Resource == unix.RLIMIT_NOFILE || r.Resource == unix.RLIMIT_FSIZE {
			continue // set above from the policy
		}
		l.rlimits = append(l.rlimits, nsjail.Rlimit{Resource: r.Resource, Cur: r.Cur, Max: r.Max})
	}
	return l, nil
}

// warnOnce returns a best-effort warning the first time this user sees it
// on this host (keyed by its subject), so that every command of an agent
// does not repeat it, and "" afterwards; it always goes to the security log.
func warnOnce(rec *seclog.Recorder, subject, msg string) string {
	rec.Record(seclog.Event{Kind: seclog.KindSandbox, Rule: "enforcement", Subject: subject, Message: msg, Level: slog.LevelInfo})
	dir := hostdirs.Cache()
	if dir != "" {
		key := fmt.Sprintf("%x", []byte(subject))
		if len(key) > 64 {
			key = key[:64]
		}
		mark := filepath.Join(dir, "warned-"+key)
		if _, err := os.Stat(mark); err == nil {
			return ""
		}
		if os.MkdirAll(dir, 0o700) == nil {
			_ = os.WriteFile(mark, []byte(msg+"\n"), 0o600)
		}
	}
	return "hutch: warning: " + msg + " (shown once; see the security log and hutch doctor)"
}

// events reads the cgroup's counters (zero without a cgroup).
func (l *limits) events() cgroup.Events {
	if l == nil || l.cg == nil {
		return cgroup.Events{}
	}
	e, _ := l.cg.Events()
	return e
}

// report turns what a command's run added to the counters, and how it
// ended, into security events (which the run's summary then lists).
func (l *limits) report(before, after cgroup.Events, status unix.WaitStatus, p *policy.Policy, rec *seclog.Recorder) {
	d := cgroup.Events{
		OOMKills:         after.OOMKills - before.OOMKills,
		PidsMaxHits:      after.PidsMaxHits - before.PidsMaxHits,
		CPUThrottled:     after.CPUThrottled - before.CPUThrottled,
		CPUThrottledUsec: after.CPUThrottledUsec - before.CPUThrottledUsec,
	}
	if note := d.CPUNote(l.user); note != "" {
		// Throttling slows a command down but stops nothing: logged, not
		// summarized.
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources.cpus", Subject: "cpu throttled",
			Message: strings.TrimPrefix(note, "hutch: "), Level: slog.LevelInfo,
			Detail: map[string]any{"backend": l.backend, "throttled_periods": d.CPUThrottled, "throttled_usec": d.CPUThrottledUsec}})
	}
	for _, m := range d.Messages(l.user) {
		kind, subject := "memory", cgroup.FormatBytes(l.user.MemoryBytes)
		if strings.Contains(m, "process limit") {
			kind, subject = "pids", fmt.Sprint(l.user.Pids)
		}
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources." + kind, Subject: kind + " " + subject,
			Message: strings.TrimPrefix(m, "hutch: "), Level: slog.LevelWarn,
			Detail: map[string]any{"backend": l.backend, "oom_kills": d.OOMKills, "forks_refused": d.PidsMaxHits, "memory_peak": after.MemoryPeak}})
	}
	var m, rule string
	switch {
	case status.Signaled() && status.Signal() == unix.SIGXFSZ:
		m, rule = fmt.Sprintf("killed: file size limit %s exceeded (SIGXFSZ); raise resources.file_size", p.Resources.FileSize), "resources.file_size"
	case status.Signaled() && status.Signal() == unix.SIGXCPU:
		m, rule = "killed: CPU time limit exceeded (SIGXCPU)", "resources.cpus"
	case status.Exited() && status.ExitStatus() == 128+int(unix.SIGXFSZ):
		m, rule = fmt.Sprintf("exit status 153 is how shells report a process killed by SIGXFSZ: a file probably exceeded the file size limit %s (resources.file_size)", p.Resources.FileSize), "resources.file_size"
	case status.Exited() && status.ExitStatus() == 128+int(unix.SIGXCPU) && l.cg == nil:
		m, rule = "exit status 152 is how shells report a process killed by SIGXCPU: the CPU time limit was probably exceeded", "resources.cpus"
	}
	if m != "" {
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: rule, Subject: rule, Message: m, Level: slog.LevelWarn})
	}
}

// close kills what is left in the cgroup and removes it.
func (l *limits) close() {
	if l == nil || l.cg == nil {
		return
	}
	_ = l.cg.Kill()
	_ = l.cg.Remove()
}
