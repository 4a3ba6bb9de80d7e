//go:build mcpimage

package main

// A binary built with the mcpimage tag (`make build`) does not link the MCP
// server: the official SDK brings 50 packages (encoding/gob, a JSON Schema
// implementation, net/http, OAuth, TLS) whose initialisation every hutch
// process would pay at start, on every cold `hutch run`. It carries
// instead, compressed, the image of a hutch binary built without the tag,
// and `hutch mcp` runs that image from memory with the same arguments. The
// image is written to a sealed memfd (so neither the server nor anything it
// starts can modify it), which gets this binary's modification time so that
// the caches keyed by "this hutch binary" (the compiled seccomp filter) see
// one identity per build. A host with vm.memfd_noexec = 2 refuses
// executable memfds; there the image is unpacked once into hutch's cache
// directory (read-only, named by its hash) and run from there.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/store"
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
		if dir := store.Open().Dir(); dir != "" {
			return "a second image carried by this binary; this host refuses executable memfds (vm.memfd_noexec = 2), so it runs from a read-only copy under " + filepath.Join(dir, store.MCP.Name)
		}
		return how + ", which this host refuses (vm.memfd_noexec = 2), and there is no cache directory for a copy (set XDG_CACHE_HOME or HOME): hutch mcp fails here; use a hutch built with `go build ./cmd/hutch`, which links the server in"
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
	if errors.Is(err, unix.EACCES) { // vm.memfd_noexec = 2
		return execMCPImageFile(argv, env)
	}
	if err != nil {
		return fmt.Errorf("create a memfd for the MCP server image: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:hutch-mcp")
	defer f.Close()
	if err := unpackMCPImage(f); err != nil {
		return err
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

// unpackMCPImage writes the uncompressed image to f and gives f this
// binary's modification time.
func unpackMCPImage(f *os.File) error {
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
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), []unix.Timespec{mt, mt}, 0); err != nil {
			return fmt.Errorf("date the MCP server image: %w", err)
		}
	}
	return nil
}

// execMCPImageFile runs the image from a file, for a host that refuses
// executable memfds: $XDG_CACHE_HOME/hutch/mcp/hutch-mcp-HASH, mode 0500,
// unpacked into hutch's store by the first `hutch mcp` of this build and
// renamed into place whole (the store keeps one: a new build's copy removes
// the others; a server still running one keeps it until it exits). Unlike
// the sealed memfd, its owner could change it; the cache directory is the
// user's own and is never visible inside a sandbox (see hostdirs), which
// holds the compiled seccomp filter under the same trust.
func execMCPImageFile(argv, env []string) error {
	st := store.Open()
	if st.Dir() == "" {
		return errors.New("this host refuses executable memfds (vm.memfd_noexec = 2) and there is no cache directory (XDG_CACHE_HOME or HOME) to unpack the MCP server image into")
	}
	sum := sha256.Sum256(mcpImage)
	key := "hutch-mcp-" + hex.EncodeToString(sum[:16])
	path := st.Path(store.MCP, key)
	if !mcpImageFileOK(path) {
		if err := st.PutWith(store.MCP, key, 0o500, unpackMCPImage); err != nil {
			return fmt.Errorf("this host refuses executable memfds (vm.memfd_noexec = 2); unpack the MCP server image to %s: %w", path, err)
		}
	}
	err := syscall.Exec(path, argv, env)
	return fmt.Errorf("this host refuses executable memfds (vm.memfd_noexec = 2); execute the MCP server image %s (a cache directory on a noexec mount cannot hold it: set XDG_CACHE_HOME elsewhere): %w", path, err)
}

// mcpImageFileOK reports whether path is an image a previous run unpacked:
// a regular file of ours, mode 0500, of the image's uncompressed size (the
// gzip trailer's ISIZE, the size modulo 2^32).
func mcpImageFileOK(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o500 || len(mcpImage) < 4 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Getuid() {
		return false
	}
	return uint32(fi.Size()) == binary.LittleEndian.Uint32(mcpImage[len(mcpImage)-4:])
}
