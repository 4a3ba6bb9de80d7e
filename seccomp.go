package hutch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/seclog"
)

// seccompFilter loads the policy's profile and compiles it (through the
// on-disk cache) with user notification, so denials can be reported.
//
// A first, cheaper cache is keyed by the profile's raw bytes: a hit skips
// parsing and validating the profile (~2 ms in a fresh process). Only
// profiles that parsed and compiled are ever stored, so a malformed file
// is always parsed and reported.
func seccompFilter(ctx context.Context, p *policy.Policy, logger *slog.Logger) (*seccompprofiles.Filter, string, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	name := p.Seccomp.Profile
	var raw []byte
	if name == "" || name == policy.SeccompDefault {
		name = "default"
		raw = seccompprofiles.DefaultJSON()
	} else {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, "", fmt.Errorf("seccomp profile %s: %w", name, err)
		}
		raw = b
	}
	watch, _ := seccompprofiles.NotifyAvailable()
	compile := func(ctx context.Context) (*seccompprofiles.Filter, error) {
		var prof *seccompprofiles.Profile
		var err error
		if name == "default" {
			prof = seccompprofiles.Default()
		} else if prof, err = seccompprofiles.Parse(raw, name); err != nil {
			return nil, err
		}
		if watch {
			prof = seccompprofiles.WatchNetwork(prof)
		}
		cache := &seccompprofiles.Cache{Dir: seccompprofiles.DefaultCacheDir(), Logger: logger}
		f, _, err := cache.Compile(ctx, prof, seccompprofiles.Options{Notify: true})
		if err != nil {
			return nil, fmt.Errorf("seccomp profile %s: %w", name, err)
		}
		return f, nil
	}
	fastPath := fastFilterPath(raw, watch)
	// On a hit, the denial tables come from the compile cache (through the
	// same compile) the first time a command hits a denial.
	if f := loadFastFilter(fastPath, func() (*seccompprofiles.Filter, error) { return compile(context.Background()) }); f != nil {
		logger.Debug("seccomp filter cache hit", "path", fastPath)
		return f, name, nil
	}
	f, err := compile(ctx)
	if err != nil {
		return nil, "", err
	}
	storeFastFilter(fastPath, f)
	return f, name, nil
}

// fastFilterPath names the raw-bytes cache entry of a profile: the bytes,
// whether connect is watched, the kernel (notification support, syscall
// table) and this hutch binary (its libseccomp and compiler) all key it.
func fastFilterPath(raw []byte, watch bool) string {
	dir := seccompprofiles.DefaultCacheDir()
	if dir == "" {
		return ""
	}
	h := sha256.New()
	h.Write([]byte("hutch-seccomp-fast-v1\x00"))
	h.Write(raw)
	fmt.Fprintf(h, "\x00watch=%v\x00", watch)
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Write(u.Release[:])
		h.Write(u.Version[:])
	}
	// /proc/self/exe, not the name: the MCP server image runs from a
	// memfd, dated like the binary that carried it (cmd/hutch/mcp_image.go).
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat("/proc/self/exe"); err == nil {
			fmt.Fprintf(h, "\x00%s\x00%d\x00%d", exe, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return filepath.Join(dir, "raw-"+hex.EncodeToString(h.Sum(nil)))
}

// The fast cache keeps the program of a profile in PATH.bpf (magic, a
// notify byte, struct sock_filter[]), read on every start. The denial
// tables are not in it: decoding them costs a fresh process ~1 ms of JSON
// reflection set-up, so they are fetched by tables, from the compile cache,
// only when a command first hits a denial.
const fastMagic = "hutch-bpf-v1\x00"

func loadFastFilter(path string, tables func() (*seccompprofiles.Filter, error)) *seccompprofiles.Filter {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path + ".bpf")
	if err != nil || len(b) < len(fastMagic)+1 || string(b[:len(fastMagic)]) != fastMagic {
		return nil
	}
	bpf := b[len(fastMagic)+1:]
	if len(bpf) == 0 || len(bpf)%8 != 0 {
		return nil
	}
	f := &seccompprofiles.Filter{BPF: bpf, Notify: b[len(fastMagic)] == 1}
	f.LoadTablesLazily(tables)
	return f
}

func storeFastFilter(path string, f *seccompprofiles.Filter) {
	if path == "" || f.NotifyUnavailable != "" {
		return
	}
	b := append([]byte(fastMagic), 0)
	if f.Notify {
		b[len(fastMagic)] = 1
	}
	b = append(b, f.BPF...)
	_ = hostdirs.WriteFile(path+".bpf", b) // a cache: the next run compiles again
}

// notifyPair makes the socketpair over which the exec stage sends its
// seccomp listener: the child end goes to the sandbox, the other stays.
func notifyPair() (mine, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp notification socket: %w", err)
	}
	// Our end is read through the runtime's poller (serveSeccomp).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("seccomp notification socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "seccomp-notify"), os.NewFile(uintptr(fds[1]), "seccomp-notify-child"), nil
}

// serveSeccomp receives the listener fd from the exec stage (or a session's
// spawner) and answers its notifications until ctx ends or no process uses
// the filter any more. Every denial becomes a security event, recorded for
// the command recFor names (from the calling process's pid, as seen from
// here: one listener may serve many commands).
func serveSeccomp(ctx context.Context, sock *os.File, f *seccompprofiles.Filter, profile string, recFor func(pid uint32) *seclog.Recorder) {
	defer sock.Close()
	buf := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4))
	var oobn int
	var err error
	rc, rerr := sock.SyscallConn()
	if rerr == nil {
		// Parked until the exec stage sends its listener (or fails and
		// the socket ends), not holding a thread in recvmsg.
		rerr = rc.Read(func(fd uintptr) bool {
			for {
				_, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
				if err != unix.EINTR {
					return err != unix.EAGAIN
				}
			}
		})
	}
	if rerr != nil || err != nil || oobn == 0 {
		return // the exec stage failed before loading the filter, or had none
	}
	scms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(scms) == 0 {
		return
	}
	fds, err := unix.ParseUnixRights(&scms[0])
	if err != nil || len(fds) == 0 {
		return
	}
	lfd := fds[0]
	defer unix.Close(lfd)
	watch := func(n seccompprofiles.Notification, mem seccompprofiles.MemReader) seccompprofiles.Verdict {
		return netWatcher(recFor(n.Pid))(n, mem)
	}
	_ = seccompprofiles.ServeWatch(ctx, lfd, f, watch, func(d seccompprofiles.Denial, n seccompprofiles.Notification) {
		rec := recFor(n.Pid)
		errno := unix.Errno(d.Errno)
		what := describeCall(d.Name, n.Args)
		rec.Record(seclog.Event{
			Kind:    seclog.KindSeccomp,
			Rule:    "seccomp profile " + profile,
			Subject: what,
			Message: "blocked by seccomp policy: " + what,
			Hint:    "see docs/SECCOMP.md",
			Level:   slog.LevelWarn,
			Detail: map[string]any{
				"syscall": d.Name,
				"args":    argsHex(n.Args),
				"errno":   unix.ErrnoName(errno),
				"pid":     n.Pid,
				"reason":  d.Reason,
			},
		})
	})
}

// describeCall names a denied call precisely where one syscall covers
// several operations (an ioctl request, namespace flags, a signal to pid 1).
func describeCall(name string, a [6]uint64) string {
	switch name {
	case "ioctl":
		switch uint32(a[1]) {
		case unix.TIOCSTI:
			return "ioctl TIOCSTI (terminal input injection)"
		case unix.TIOCLINUX:
			return "ioctl TIOCLINUX"
		}
	case "clone", "unshare", "setns":
		flags := a[0]
		if name == "setns" {
			flags = a[1]
		}
		var ns []string
		for _, f := range []struct {
			bit  uint64
			name string
		}{{unix.CLONE_NEWUSER, "CLONE_NEWUSER"}, {unix.CLONE_NEWNS, "CLONE_NEWNS"}, {unix.CLONE_NEWPID, "CLONE_NEWPID"},
			{unix.CLONE_NEWNET, "CLONE_NEWNET"}, {unix.CLONE_NEWIPC, "CLONE_NEWIPC"}, {unix.CLONE_NEWUTS, "CLONE_NEWUTS"},
			{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {unix.CLONE_NEWTIME, "CLONE_NEWTIME"}} {
			if flags&f.bit != 0 {
				ns = append(ns, f.name)
			}
		}
		if len(ns) > 0 {
			return name + " " + strings.Join(ns, "|")
		}
	case "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal":
		if a[0] == 1 {
			return name + " of the sandbox's init (pid 1)"
		}
	}
	return name
}

func argsHex(a [6]uint64) string {
	s := make([]string, len(a))
	for i, v := range a {
		s[i] = fmt.Sprintf("%#x", v)
	}
	return strings.Join(s, ",")
}
