//go:build mcpimage

package main

// A binary built with the mcpimage tag (`make build`) does not link the MCP
// server: the official SDK brings 50 packages (encoding/gob, a JSON Schema
// implementation, net/http, OAuth, TLS) whose initialisation every hutch
// process would pay at start, ~1 ms of each cold `hutch run`. It carries
// instead, compressed, the image of a hutch binary built without the tag,
// and `hutch mcp` runs that image from memory with the same arguments. The
// image is written to a sealed memfd (so neither the server nor anything it
// starts can modify it), which gets this binary's modification time so that
// the caches keyed by "this hutch binary" (the compiled seccomp filter) see
// one identity per build.

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
)

// mcpImage is the gzip-compressed hutch binary with the MCP server linked
// in; the Makefile builds it into mcpimage/ before this binary.
//
//go:embed mcpimage/hutch-mcp.gz
var mcpImage []byte

// mcpServerStatus says how `hutch mcp` runs, for hutch doctor: from the
// image in a sealed memfd, which a host with vm.memfd_noexec = 2 refuses.
func mcpServerStatus() string {
	const how = "a second image carried by this binary, run from a sealed memfd"
	if readTrim("/proc/sys/vm/memfd_noexec") == "2" {
		return how + ", which this host refuses (vm.memfd_noexec = 2): hutch mcp fails here; use a hutch built with `go build ./cmd/hutch`, which links the server in"
	}
	return how
}

func serveMCP(c *cli.Context) error {
	err := execMCPImage(os.Args, os.Environ())
	return &exitError{hutch.ExitSetup, "hutch: mcp: " + err.Error() + "; a hutch built with `go build ./cmd/hutch` (no mcpimage tag) links the MCP server in instead"}
}

// execMCPImage replaces this process with the embedded image, run with
// argv and env. It returns only on failure.
func execMCPImage(argv, env []string) error {
	fd, err := unix.MemfdCreate("hutch-mcp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("hutch-mcp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return fmt.Errorf("create a memfd for the MCP server image (vm.memfd_noexec=2 forbids executable memfds): %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:hutch-mcp")
	defer f.Close()
	zr, err := gzip.NewReader(bytes.NewReader(mcpImage))
	if err != nil {
		return fmt.Errorf("read the embedded MCP server image: %w", err)
	}
	if _, err := io.Copy(f, zr); err != nil {
		return fmt.Errorf("unpack the embedded MCP server image: %w", err)
	}
	if err := zr.Close(); err != nil {
		return fmt.Errorf("unpack the embedded MCP server image: %w", err)
	}
	if self, err := os.Stat("/proc/self/exe"); err == nil {
		mt := unix.NsecToTimespec(self.ModTime().UnixNano())
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), []unix.Timespec{mt, mt}, 0); err != nil {
			return fmt.Errorf("date the MCP server image: %w", err)
		}
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal the MCP server image: %w", err)
	}
	// The kernel opens the file before it closes the close-on-exec
	// descriptors, and an ELF image needs no path afterwards.
	err = syscall.Exec("/proc/self/fd/"+strconv.Itoa(fd), argv, env)
	return fmt.Errorf("execute the MCP server image: %w", err)
}
