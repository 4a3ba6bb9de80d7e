package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stageDir is where the new root is assembled inside the sandbox's private
// mount namespace before pivot_root (Plan.Stage). Mounting over it there
// does not touch the host's view.
var stageDir = "/tmp"

// Timing receives the duration of each phase of Execute.
type Timing func(name string, d time.Duration)

// Execute builds the plan's root filesystem and pivots into it. It must run
// in a fresh mount namespace whose user namespace it owns, as pid 1 of a
// fresh pid namespace (for /proc). On return the process's root and working
// directory are the new root's "/", and the old root is detached.
func Execute(p *Plan, timing Timing) error {
	if timing == nil {
		timing = func(string, time.Duration) {}
	}
	t0 := time.Now()
	// Open every bind source before changing any mount: afterwards the host
	// paths may be hidden (a workspace under /tmp, say).
	srcs := make([]int, len(p.Steps))
	defer func() {
		for _, fd := range srcs {
			if fd > 0 {
				unix.Close(fd)
			}
		}
	}()
	devNull := -1
	for i, s := range p.Steps {
		switch s.Kind {
		case Bind:
			fd, err := unix.Open(s.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				if s.Optional && errors.Is(err, unix.ENOENT) {
					srcs[i] = -1
					continue
				}
				return fmt.Errorf("open %s for %s: %w", s.Source, s.what(), err)
			}
			srcs[i] = fd
		case MaskFile:
			if devNull < 0 {
				fd, err := unix.Open("/dev/null", unix.O_PATH|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("open /dev/null for masking: %w", err)
				}
				devNull = fd
				srcs[i] = fd
			}
		}
	}
	timing("mounts.open", time.Since(t0))

	t0 = time.Now()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private in the new mount namespace: %w", err)
	}
	if p.Stage != "" {
		stageDir = p.Stage
	}
	size := p.RootSize
	if size <= 0 {
		size = 8 << 20
	}
	if err := unix.Mount("hutch-root", stageDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,nr_inodes=8192,mode=0755", size)); err != nil {
		return fmt.Errorf("mount the root tmpfs on %s: %w", stageDir, err)
	}
	rootFD, err := unix.Open(stageDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open new root: %w", err)
	}
	defer unix.Close(rootFD)
	timing("mounts.root", time.Since(t0))

	t0 = time.Now()
	for i, s := range p.Steps {
		if err := apply(rootFD, s, srcs[i], devNull); err != nil {
			return fmt.Errorf("%s %s (%s): %w", s.Kind, s.Target, s.what(), err)
		}
	}
	timing("mounts.steps", time.Since(t0))

	t0 = time.Now()
	if err := unix.Chdir(stageDir); err != nil {
		return fmt.Errorf("chdir to new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root into the new root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir / after pivot_root: %w", err)
	}
	if err := setAttr("/", false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	timing("mounts.pivot", time.Since(t0))
	return nil
}

func (s Step) what() string {
	if s.Why != "" {
		return s.Why
	}
	return string(s.Kind)
}

// under returns the path of target beneath the staging root.
func under(target string) string {
	return filepath.Join(stageDir, filepath.Clean("/"+target))
}

func apply(rootFD int, s Step, src, devNull int) error {
	t := under(s.Target)
	switch s.Kind {
	case Bind:
		if src < 0 {
			return nil // optional and missing
		}
		var st unix.Stat_t
		if err := unix.Fstat(src, &st); err != nil {
			return fmt.Errorf("stat source: %w", err)
		}
		if err := mountPoint(t, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
		if err := unix.Mount(fdPath(src), t, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", s.Source, err)
		}
		attr := uint64(unix.MOUNT_ATTR_NOSUID)
		isDev := st.Mode&unix.S_IFMT == unix.S_IFCHR || st.Mode&unix.S_IFMT == unix.S_IFBLK
		if !isDev {
			attr |= unix.MOUNT_ATTR_NODEV
		}
		if s.ReadOnly {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		return setAttr(t, true, attr)
	case Pin, Protect:
		fd, err := openBeneath(rootFD, s.Target, s.NoSymlinks)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		p := fdPath(fd)
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind onto itself: %w", err)
		}
		attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if s.Kind == Protect {
			attr |= unix.MOUNT_ATTR_RDONLY
		}
		// The new mount now sits on top of fd's dentry; reopen to reach it.
		fd2, err := openBeneath(rootFD, s.Target, s.NoSymlinks)
		if err != nil {
			return err
		}
		defer unix.Close(fd2)
		return setAttrFD(fd2, true, attr)
	case Tmpfs:
		if err := mountPoint(t, true); err != nil {
			return err
		}
		mode := s.Mode
		if mode == 0 {
			mode = 0o755
		}
		opts := "mode=" + strconv.FormatUint(uint64(mode), 8)
		if s.Size > 0 {
			opts += ",size=" + strconv.FormatInt(s.Size, 10)
		}
		return unix.Mount("tmpfs", t, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	case Proc:
		if err := mountPoint(t, true); err != nil {
			return err
		}
		return unix.Mount("proc", t, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case Devpts:
		if err := mountPoint(t, true); err != nil {
			return err
		}
		return unix.Mount("devpts", t, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	case Sysfs:
		if err := mountPoint(t, true); err != nil {
			return err
		}
		return unix.Mount("sysfs", t, "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "")
	case Mkdir:
		mode := s.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := os.MkdirAll(t, os.FileMode(mode)); err != nil {
			return err
		}
		return os.Chmod(t, os.FileMode(mode)|modeSticky(mode))
	case File:
		if err := os.MkdirAll(filepath.Dir(t), 0o755); err != nil {
			return err
		}
		mode := s.Mode
		if mode == 0 {
			mode = 0o644
		}
		f, err := os.OpenFile(t, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, os.FileMode(mode))
		if err != nil {
			return err
		}
		_, err = f.WriteString(s.Data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case Symlink:
		if err := os.MkdirAll(filepath.Dir(t), 0o755); err != nil {
			return err
		}
		return os.Symlink(s.Data, t)
	case MaskFile:
		if !exists(t) {
			return nil
		}
		if err := unix.Mount(fdPath(devNull), t, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		return setAttr(t, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	case MaskDir:
		if !exists(t) {
			return nil
		}
		return unix.Mount("tmpfs", t, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4096,nr_inodes=1,mode=0555")
	case Seal:
		return setAttr(t, false, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	case ReadOnly:
		if !exists(t) {
			return nil
		}
		if err := unix.Mount(t, t, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		return setAttr(t, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

func modeSticky(mode uint32) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// mountPoint creates an empty directory or file at p to mount onto.
func mountPoint(p string, dir bool) error {
	err := makeMountPoint(p, dir)
	if errors.Is(err, unix.EROFS) {
		inside := strings.TrimPrefix(p, stageDir)
		return fmt.Errorf("the mount point %s does not exist inside an already mounted read-only tree, and cannot be created there; choose a target that exists, or one outside the tooling tree (e.g. /mnt/NAME): %w", inside, err)
	}
	return err
}

func makeMountPoint(p string, dir bool) error {
	if dir {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create mount point: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	return f.Close()
}

// openBeneath opens target (an absolute sandbox path) beneath the new root
// as O_PATH. With noSymlinks, no component may be a symlink: workspace
// contents are controlled by sandboxed code and must not redirect a mount.
func openBeneath(rootFD int, target string, noSymlinks bool) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if noSymlinks {
		how.Resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	rel := strings.TrimPrefix(filepath.Clean("/"+target), "/")
	fd, err := unix.Openat2(rootFD, rel, &how)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("open %s: a path component is a symlink, which hutch refuses here: %w", target, err)
		}
		return -1, fmt.Errorf("open %s: %w", target, err)
	}
	return fd, nil
}

// setAttr changes the mount attributes of the mount at path (and, with
// recursive, of every mount beneath it). Locked flags inherited from a more
// privileged mount namespace are kept: mount_setattr only adds attributes.
func setAttr(path string, recursive bool, set uint64) error {
	flags := 0
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(unix.AT_FDCWD, path, uint(flags), &unix.MountAttr{Attr_set: set})
	if errors.Is(err, unix.ENOSYS) {
		return remountFallback(path, set)
	}
	if err != nil {
		return fmt.Errorf("mount_setattr %s: %w", path, err)
	}
	return nil
}

func setAttrFD(fd int, recursive bool, set uint64) error {
	flags := unix.AT_EMPTY_PATH
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(fd, "", uint(flags), &unix.MountAttr{Attr_set: set})
	if errors.Is(err, unix.ENOSYS) {
		return remountFallback(fdPath(fd), set)
	}
	if err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return nil
}

// remountFallback is for kernels before 5.12: a bind remount that keeps the
// mount's existing (possibly locked) flags. It is not recursive.
func remountFallback(path string, set uint64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	flags := uintptr(st.Flags) & (unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	if set&unix.MOUNT_ATTR_RDONLY != 0 {
		flags |= unix.MS_RDONLY
	}
	if set&unix.MOUNT_ATTR_NOSUID != 0 {
		flags |= unix.MS_NOSUID
	}
	if set&unix.MOUNT_ATTR_NODEV != 0 {
		flags |= unix.MS_NODEV
	}
	if set&unix.MOUNT_ATTR_NOEXEC != 0 {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", path, err)
	}
	return nil
}
