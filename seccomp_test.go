package hutch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/seccompprofiles"
)

// The fast cache must give back the same program, and, once a command hits
// a denial, the same answers as a fresh compile (its tables fetched then).
func TestFastFilterRoundTrip(t *testing.T) {
	cache := &seccompprofiles.Cache{Dir: t.TempDir()}
	full, _, err := cache.Compile(context.Background(), seccompprofiles.Default(), seccompprofiles.Options{Notify: true})
	if err != nil {
		t.Fatalf("compile the default profile: %v", err)
	}
	path := filepath.Join(t.TempDir(), "raw-test")
	tables := func() (*seccompprofiles.Filter, error) {
		f, _, err := cache.Compile(context.Background(), seccompprofiles.Default(), seccompprofiles.Options{Notify: true})
		return f, err
	}
	if loadFastFilter(path, tables) != nil {
		t.Fatal("an empty cache returned a filter")
	}
	storeFastFilter(path, full)
	got := loadFastFilter(path, tables)
	if got == nil {
		t.Fatal("the stored filter was not found")
	}
	if !bytes.Equal(got.BPF, full.BPF) || got.Notify != full.Notify {
		t.Fatalf("program or notify flag changed: %d vs %d bytes, notify %v vs %v", len(got.BPF), len(full.BPF), got.Notify, full.Notify)
	}
	if got.Denials != nil {
		t.Error("denial tables decoded before any lookup")
	}
	for _, nr := range []uint32{unix.SYS_KEYCTL, unix.SYS_IOCTL, unix.SYS_MOUNT, 9999} {
		args := [6]uint64{0, unix.TIOCSTI}
		if w, g := full.Lookup(nr, args), got.Lookup(nr, args); w.Name != g.Name || w.Errno != g.Errno || w.Reason != g.Reason {
			t.Errorf("syscall %d: lazy lookup %+v, full %+v", nr, g, w)
		}
	}

	// A truncated program is not used.
	if err := os.WriteFile(path+".bpf", []byte(fastMagic+"\x01abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if loadFastFilter(path, tables) != nil {
		t.Error("a program of 3 bytes was accepted")
	}
}
