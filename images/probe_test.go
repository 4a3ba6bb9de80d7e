package images

import (
	"os"
	"path/filepath"
	"testing"
)

// OverlayUsable probes once per boot: the verdict is kept in the store
// and read back while the boot id and kernel are the same; another boot,
// another kernel, or a corrupt cache probes again. The probe gets two
// directories under tmp/, the second holding a file probe, removed after.
func TestOverlayUsable(t *testing.T) {
	s, _ := Open(storeDir(t))
	calls := 0
	answer := ""
	probe := func(lower1, lower2 string) string {
		calls++
		if fi, err := os.Stat(lower1); err != nil || !fi.IsDir() {
			t.Errorf("lower1 %s: %v", lower1, err)
		}
		if _, err := os.Stat(filepath.Join(lower2, "probe")); err != nil {
			t.Errorf("lower2 has no file probe: %v", err)
		}
		if rel, err := filepath.Rel(s.tmpDir(), lower2); err != nil || !filepath.IsLocal(rel) {
			t.Errorf("lower2 %s is not under tmp/", lower2)
		}
		return answer
	}
	boot := hostBoot{context: "boot-1", kernel: "6.1.0"}
	check := func(what string, h hostBoot, wantOK bool, wantWhy string, wantCalls int) {
		t.Helper()
		ok, why := s.overlayUsable(probe, h)
		if ok != wantOK || why != wantWhy || calls != wantCalls {
			t.Errorf("%s: %v %q after %d probes, want %v %q after %d", what, ok, why, calls, wantOK, wantWhy, wantCalls)
		}
		if es, _ := os.ReadDir(s.tmpDir()); len(es) != 0 {
			t.Errorf("%s: tmp/ holds %v", what, es)
		}
	}
	check("first", boot, true, "", 1)
	check("same boot", boot, true, "", 1)
	answer = "mount overlayfs: invalid argument"
	check("another boot", hostBoot{context: "boot-2", kernel: "6.1.0"}, false, answer, 2)
	check("that boot again (the no is kept too)", hostBoot{context: "boot-2", kernel: "6.1.0"}, false, answer, 2)
	answer = ""
	check("another kernel", hostBoot{context: "boot-2", kernel: "6.8.0"}, true, "", 3)
	if err := os.WriteFile(filepath.Join(s.Dir, overlayProbeFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("corrupt cache", hostBoot{context: "boot-2", kernel: "6.8.0"}, true, "", 4)
	check("rewritten", hostBoot{context: "boot-2", kernel: "6.8.0"}, true, "", 4)
	check("no boot id: nothing cached", hostBoot{kernel: "6.8.0"}, true, "", 5)
	check("no boot id again", hostBoot{kernel: "6.8.0"}, true, "", 6)

	// The real boot: cached once like any other.
	if thisBoot().context == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id here")
	}
	s.OverlayUsable(probe)
	s.OverlayUsable(probe)
	if calls != 7 {
		t.Errorf("%d probes after two OverlayUsable calls on this boot, want 1 more", calls-6)
	}
}
