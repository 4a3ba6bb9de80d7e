package hutch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/hostdirs"
)

// makeScratch makes the landlock isolation's private scratch directory
// (its home/ is the commands' HOME, its tmp/ their TMPDIR) beneath hutch's
// runtime directory, which only the user can enter. Its name carries this
// process's pid: the directories of hutch processes that are gone (killed
// before their Close) are removed here, so none outlives the next sandbox.
func makeScratch() (string, error) {
	base := filepath.Join(hostdirs.Runtime(), "scratch")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", base, err)
	}
	pruneScratch(base)
	dir, err := os.MkdirTemp(base, "sandbox-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("create a directory in %s: %w", base, err)
	}
	for _, sub := range []string{"home", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("create %s: %w", filepath.Join(dir, sub), err)
		}
	}
	return dir, nil
}

// pruneScratch removes the scratch directories in base whose hutch process
// no longer exists.
func pruneScratch(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "sandbox-")
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}
