package hutch

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
)

// maxPlanHints bounds the plan hints kept in the cache (one per command line
// and directory); the oldest go first.
const maxPlanHints = 64

// storePlanHint stores plan as the plan hint at path, for the next
// prestarted init of the same command line in the same directory (see
// "plan hint" in nsjail/init.c): it builds the root's policy-independent
// part while the supervisor's runtime starts. Called only when this run's
// init could not use its hint; an unchanged hint is not rewritten. Failures
// only cost the next run its head start, and are logged at debug level.
func storePlanHint(path string, plan *mounts.Plan, logger *slog.Logger) {
	if err := writePlanHint(path, plan); err != nil && logger != nil {
		logger.Debug("plan hint not stored", "path", path, "error", err)
	}
}

func writePlanHint(path string, plan *mounts.Plan) error {
	b, err := nsjail.EncodePlanHint(plan)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := hostdirs.WriteFile(path, b); err != nil {
		return err
	}
	return prunePlanHints(filepath.Dir(path), maxPlanHints)
}

// prunePlanHints removes the oldest hints beyond keep.
func prunePlanHints(dir string, keep int) error {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) <= keep {
		return err
	}
	type hint struct {
		name string
		mod  int64
	}
	var hs []hint
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			hs = append(hs, hint{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].mod > hs[j].mod })
	for _, h := range hs[min(keep, len(hs)):] {
		if err := os.Remove(filepath.Join(dir, h.name)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
