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

// userTasks counts the tasks (threads) whose real uid is this process's:
// what RLIMIT_NPROC counts outside a user namespace.
func userTasks() int64 {
	uid := strconv.Itoa(os.Getuid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real, threads string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			} else if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads = strings.TrimSpace(v)
			}
		}
		if real == uid {
			t, _ := strconv.ParseInt(threads, 10, 64)
			n += max(t, 1)
		}
	}
	return n
}
