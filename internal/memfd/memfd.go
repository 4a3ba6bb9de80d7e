// Package memfd creates the memfds hutch uses for data (the seccomp
// program on its way to libseccomp's export and to the exec stage), which
// are never to be executed.
package memfd

import (
	"errors"

	"golang.org/x/sys/unix"
)

// NoExec is memfd_create(name, flags|MFD_NOEXEC_SEAL): the memfd can never
// be made executable, and Linux 6.3-6.5 with vm.memfd_noexec = 2 refuse a
// memfd without the flag (6.6 and later imply it). Kernels before 6.3,
// which answer EINVAL, get a memfd created with flags alone.
func NoExec(name string, flags int) (int, error) {
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_NOEXEC_SEAL)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(name, flags)
	}
	return fd, err
}
