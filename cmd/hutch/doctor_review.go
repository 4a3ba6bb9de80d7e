package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/review"
)

// probeReview says whether review mode works here: a review sandbox on an
// empty workspace writes one file, which must land in a change set (then
// discarded). What fails says why: no overlayfs, none in a user namespace
// (Linux < 5.11), a state directory whose filesystem overlayfs cannot use
// as an upper layer.
func probeReview(ctx context.Context, canSandbox bool) string {
	if !strings.Contains(readTrim("/proc/filesystems"), "overlay") {
		return "overlay filesystem not present: review mode (--review) is refused here"
	}
	if !canSandbox {
		return "overlay filesystem present; review mode not tried (no sandbox can be made)"
	}
	if hutch.ChangesRoot() == "" {
		return "no state directory (neither XDG_STATE_HOME nor HOME): review mode is refused here"
	}
	dir, err := os.MkdirTemp("", "hutch-doctor-review-")
	if err != nil {
		return "review mode not tried: " + err.Error()
	}
	defer os.RemoveAll(dir)
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devnull.Close()
	p := policy.Default()
	p.Network.DiscoverRegistries = false
	p.Filesystem.Workspace, p.Filesystem.Protected, p.Filesystem.Review = dir, nil, true
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := hutch.Run(cctx, &hutch.RunOptions{Policy: p, Argv: []string{"/bin/sh", "-c", "echo x > probe"}, Stdin: devnull, Stdout: devnull, Stderr: devnull})
	if res != nil && res.Review != nil && !res.Review.Removed {
		if cs, err := review.Open(hutch.ChangesRoot(), res.Review.ID); err == nil {
			cs.Discard(0)
		}
	}
	switch {
	case err != nil:
		return "review mode (--review) is refused here: " + err.Error()
	case res.ExitCode != 0 || res.Review == nil || res.Review.Added != 1:
		return fmt.Sprintf("review mode (--review) does not work here: the probe's write (exit %d) did not land in a change set", res.ExitCode)
	}
	if _, err := os.Stat(dir + "/probe"); err == nil {
		return "review mode (--review) is broken here: the probe's write reached the workspace"
	}
	return "ok: review mode (--review) works (overlayfs in a user namespace, change sets in " + hutch.ChangesRoot() + ")"
}
