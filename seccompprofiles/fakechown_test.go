package seccompprofiles

import (
	"testing"

	"golang.org/x/sys/unix"
)

// FakeChown: the chown calls return 0 without the notification path
// (they are no denial), whatever their ids; the profile without it leaves
// them to the kernel (allowed).
func TestFakeChown(t *testing.T) {
	arch, ok := nativeAuditArch()
	if !ok {
		t.Skip("no native audit arch")
	}
	plain, err := Compile(Default(), Options{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	fake, err := Compile(FakeChown(Default()), Options{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, nr := range []int32{unix.SYS_CHOWN, unix.SYS_FCHOWN, unix.SYS_LCHOWN, unix.SYS_FCHOWNAT} {
		d := seccompData{nr: nr, arch: arch, args: [6]uint64{3, 100, 100}}
		if v := runBPF(t, fake.BPF, d); v != unix.SECCOMP_RET_ERRNO {
			t.Errorf("syscall %d with FakeChown: verdict %#x, want SECCOMP_RET_ERRNO with errno 0", nr, v)
		}
		if v := runBPF(t, plain.BPF, d); v != unix.SECCOMP_RET_ALLOW {
			t.Errorf("syscall %d without FakeChown: verdict %#x, want allow", nr, v)
		}
	}
	if v := runBPF(t, fake.BPF, seccompData{nr: unix.SYS_GETPID, arch: arch}); v != unix.SECCOMP_RET_ALLOW {
		t.Errorf("getpid with FakeChown: %#x", v)
	}
}
