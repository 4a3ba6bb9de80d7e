package limits

import (
	"slices"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/seclog"
)

// On the rlimit backend the watchdog's counters are worded as a cgroup's
// are: the memory kill in the same words, the process limit as reached
// (the kernel does not say how many forks it refused), with the user's
// limits, not the margin hutch added.
func TestReportWatchdog(t *testing.T) {
	res := plan.Resources{Backend: cgroup.BackendRlimit, Limits: cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64}, Shared: true,
		Watchdog: &plan.Watchdog{MemoryBytes: 256 << 20, Nproc: 67}}
	l := &Sandbox{res: res, backend: cgroup.BackendRlimit, watchdog: &watchdog{started: closed()}}
	rec := seclog.NewRecorder(nil, "id", []string{"x"})
	before := Events{Events: cgroup.Events{OOMKills: 1}, PidsReached: 3}
	after := Events{Events: cgroup.Events{OOMKills: 2, MemoryPeak: 300 << 20}, PidsReached: 5}
	l.Report(before, after, 0, rec)
	got := rec.Summary()
	for _, want := range []string{"hutch: killed: memory limit 256MiB exceeded", "hutch: process limit 64 reached: forks beyond it fail (the session's commands share the limit)"} {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	// Nothing new: nothing said.
	rec = seclog.NewRecorder(nil, "id", []string{"x"})
	l.Report(after, after, 0, rec)
	if s := rec.Summary(); len(s) != 0 {
		t.Errorf("no change, yet %q", s)
	}
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
