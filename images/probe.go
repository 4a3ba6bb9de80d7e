package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hutchsandbox/hutch/internal/kernel"
)

// overlayProbeFile is the cached verdict of OverlayUsable, in the store's
// directory.
const overlayProbeFile = "overlay-probe.json"

// overlayVerdict is what overlay-probe.json holds: the probe's outcome on
// the boot and kernel it ran on.
type overlayVerdict struct {
	Context string `json:"context"` // kernel.ProbeContext
	Kernel  string `json:"kernel"`
	OK      bool   `json:"ok"`
	Why     string `json:"why,omitempty"`
}

// hostBoot names the running boot: a verdict holds for as long as both
// are the same (a reboot may bring another kernel, or other sysctls).
type hostBoot struct {
	context, kernel string
}

// thisBoot is the running boot as a verdict holds for it: the boot id
// with the caller's namespaces and seccomp mode (kernel.ProbeContext: a
// container sharing the store with its host gets a verdict of its own),
// and the kernel's release (context "" when it cannot be read: then
// nothing is cached).
func thisBoot() hostBoot {
	return hostBoot{context: kernel.ProbeContext(), kernel: kernel.Release()}
}

// OverlayUsable says whether an image's root can be read-only overlayfs
// mounts of its layers here (in a sandbox's user namespace, the store's
// filesystem as the lower layers), and why not when it cannot. probe is
// nsjail.ProbeOverlay (images does not import nsjail): it mounts an
// overlay of two directories and returns "" when the file probe of the
// second shows through, else why not.
//
// It probes at most once per boot: the verdict is kept in the store's
// overlay-probe.json with the boot id (and the caller's namespaces and
// seccomp mode: kernel.ProbeContext) and the kernel's release, and read
// back while both are the same. A cache that cannot be read or parsed, or
// is of another boot, is a miss. The probe's directories are made under
// tmp/ (the store's filesystem) with the store's lock held shared, so that
// a prune cannot take them away mid-probe.
func (s *Store) OverlayUsable(probe func(lower1, lower2 string) string) (ok bool, why string) {
	return s.overlayUsable(probe, thisBoot())
}

// overlayUsable is OverlayUsable on the boot h.
func (s *Store) overlayUsable(probe func(lower1, lower2 string) string, h hostBoot) (bool, string) {
	cache := filepath.Join(s.Dir, overlayProbeFile)
	if b, err := os.ReadFile(cache); err == nil && h.context != "" {
		var v overlayVerdict
		if json.Unmarshal(b, &v) == nil && v.Context == h.context && v.Kernel == h.kernel {
			return v.OK, v.Why
		}
	}
	why := s.probeOverlay(probe)
	v := overlayVerdict{Context: h.context, Kernel: h.kernel, OK: why == "", Why: why}
	if h.context != "" {
		// A verdict that cannot be kept is probed again next time.
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			writeAtomic(cache, append(b, '\n'), s.tmpDir())
		}
	}
	return v.OK, v.Why
}

// probeOverlay runs probe on two new directories under tmp/, the second
// holding a file probe, and removes them; it returns probe's answer, or
// why the directories could not be made.
func (s *Store) probeOverlay(probe func(lower1, lower2 string) string) string {
	unlock, err := s.lock(false)
	if err != nil {
		return fmt.Sprintf("probe overlayfs: %v", err)
	}
	defer unlock()
	tmp, err := os.MkdirTemp(s.tmpDir(), "overlay-probe-")
	if err != nil {
		return fmt.Sprintf("probe overlayfs: %v", err)
	}
	defer removeTree(tmp)
	lower1, lower2 := filepath.Join(tmp, "lower1"), filepath.Join(tmp, "lower2")
	for _, d := range []string{lower1, lower2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Sprintf("probe overlayfs: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower2, "probe"), []byte("probe\n"), 0o644); err != nil {
		return fmt.Sprintf("probe overlayfs: %v", err)
	}
	return probe(lower1, lower2)
}
