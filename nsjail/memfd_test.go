package nsjail

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The seccomp program's memfd is sealed against writes and, where the
// kernel knows the seal (Linux 6.3), against ever becoming executable.
func TestBPFMemfdSeals(t *testing.T) {
	f, err := bpfMemfd([]byte("12345678"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	const want = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if seals&want != want {
		t.Errorf("seals %#x, want %#x set", seals, want)
	}
	probe, err := unix.MemfdCreate("probe", unix.MFD_CLOEXEC|unix.MFD_NOEXEC_SEAL)
	if err != nil {
		t.Skipf("this kernel has no MFD_NOEXEC_SEAL (Linux 6.3): %v", err)
	}
	unix.Close(probe)
	if seals&unix.F_SEAL_EXEC == 0 {
		t.Errorf("seals %#x: no F_SEAL_EXEC, the program's memfd could be made executable", seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&0o111 != 0 {
		t.Errorf("mode %#o, %v: want no execute bits", st.Mode, err)
	}
}
