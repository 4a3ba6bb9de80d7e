package cgroup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ReapStale removes the cgroups hutch supervisors left behind when they
// were killed before Remove: every directory named hutch-PID-START-NAME
// whose supervisor (PID, started at START) no longer runs, in the places
// New creates them: below this process's own cgroup and each of its
// ancestors, on the cgroup v2 hierarchy and on the memory, pids and cpu v1
// hierarchies. Processes still inside are SIGKILLed first. Nothing else is
// touched; cgroups of other users that this process may not remove are
// skipped silently. It returns the directories removed.
//
// A supervisor that ran in another cgroup (another login session, another
// service) left its cgroups there; a later hutch run from that place, or
// the host's own cleanup, removes them.
func ReapStale(ctx context.Context) (removed []string, err error) {
	mu.Lock()
	defer mu.Unlock()
	var errs []error
	for _, dir := range stalePlaces() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return removed, errors.Join(append(errs, err)...)
			}
			pid, start, _, ok := parseLeafName(e.Name())
			if !ok || !e.IsDir() || alive(pid, start) {
				continue
			}
			d := filepath.Join(dir, e.Name())
			if err := reap(ctx, d, e.Name()); err != nil {
				if permissionError(err) && os.Getuid() != 0 && ownerUID(d) != os.Getuid() {
					continue // someone else's, and not ours to remove
				}
				errs = append(errs, err)
				continue
			}
			removed = append(removed, d)
		}
	}
	return removed, errors.Join(errs...)
}

// reap kills what is left in the stale cgroup d (named leaf) and below it,
// then removes it.
func reap(ctx context.Context, d, leaf string) error {
	writeString(filepath.Join(d, "cgroup.kill"), "1") // v2, 5.14+; the loop below does the rest
	procs := func() []string {
		files := []string{filepath.Join(d, "cgroup.procs")}
		for _, s := range subdirs(d) {
			files = append(files, filepath.Join(s, "cgroup.procs"))
		}
		return files
	}
	if err := killProcs(ctx, procs, leaf, 2*time.Second); err != nil {
		return err
	}
	kill := func() { killProcs(ctx, procs, leaf, 100*time.Millisecond) }
	for _, s := range append(subdirs(d), d) {
		if err := rmdirRetry(ctx, s, kill); err != nil {
			return err
		}
	}
	return nil
}

// stalePlaces lists the directories whose children may be hutch cgroups:
// this process's cgroup and its ancestors in each hierarchy hutch uses.
func stalePlaces() []string {
	var out []string
	seen := map[string]bool{}
	add := func(mount, own string) {
		for d := filepath.Join(mount, own); ; d = filepath.Dir(d) {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
			if d == mount || !strings.HasPrefix(d, mount+"/") {
				return
			}
		}
	}
	mounts, _ := parseMountinfo("/proc/self/mountinfo")
	v1own, v2own, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	switch hostMode() {
	case modeV2:
		add("/sys/fs/cgroup", relToMount(v2own, mountRoot(mounts, "/sys/fs/cgroup")))
	case modeHybrid:
		add("/sys/fs/cgroup/unified", relToMount(v2own, mountRoot(mounts, "/sys/fs/cgroup/unified")))
		fallthrough
	case modeV1:
		for _, ctrl := range wanted {
			if m, ok := findV1Mount(mounts, ctrl); ok {
				add(m.point, relToMount(v1own[ctrl], m.root))
			}
		}
	}
	return out
}
