package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
)

// doctorReport is what `hutch doctor` finds; --json prints it as is.
type doctorReport struct {
	Kernel         string            `json:"kernel"`
	UID            int               `json:"uid"`
	UserNS         string            `json:"user_namespaces"`
	AppArmorUserNS string            `json:"apparmor_restrict_unprivileged_userns,omitempty"`
	Sandbox        string            `json:"sandbox"` // "ok" or why not
	Cgroup         cgroup.Host       `json:"cgroup"`
	LandlockABI    int               `json:"landlock_abi"`
	Landlock       string            `json:"landlock"`
	Seccomp        string            `json:"seccomp"`
	SeccompNotify  string            `json:"seccomp_notify"`
	Overlayfs      string            `json:"overlayfs"`
	TIOCSTI        string            `json:"tiocsti"`
	Images         string            `json:"images"`
	MCPServer      string            `json:"mcp_server"`
	Container      *containerReport  `json:"container,omitempty"`
	Areas          map[string]string `json:"areas"`
	CanSandbox     bool              `json:"can_sandbox"`
	// Landlock isolation (sandbox.isolation = "landlock", the fallback of
	// "auto"): whether such a sandbox can be made here, and what it does
	// not give that namespaces do.
	LandlockSandbox string   `json:"landlock_isolation"` // "ok" or why not
	LandlockLimits  []string `json:"landlock_isolation_limits"`
	CanSandboxNoNS  bool     `json:"can_sandbox_landlock"`
}

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "say what a sandbox gets on this host for this user, and what is not enforced; exit 1 when no sandbox can be made with namespaces (landlock_isolation says whether one can without)",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: containerSeccompFlag, Usage: "print the seccomp profile a container needs for hutch (Docker's default plus what hutch needs) as JSON, and how to use it on stderr"}},
		Action: func(c *cli.Context) error {
			if c.Bool(containerSeccompFlag) {
				return printContainerSeccomp(c.App.Writer, c.App.ErrWriter)
			}
			r := diagnose(c.Context)
			if c.Bool("json") {
				b, _ := json.MarshalIndent(r, "", "  ")
				fmt.Println(string(b))
			} else {
				printDoctor(r)
			}
			if !r.CanSandbox {
				return &exitError{code: 1}
			}
			return nil
		},
	}
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func diagnose(ctx context.Context) *doctorReport {
	var u unix.Utsname
	unix.Uname(&u)
	r := &doctorReport{Kernel: unix.ByteSliceToString(u.Release[:]), UID: os.Getuid(), Areas: map[string]string{}}
	if p := nsjail.CheckUserNamespaces(); p != nil {
		r.UserNS = "unavailable: " + p.Error()
	} else {
		r.UserNS = "allowed by the sysctls (user.max_user_namespaces = " + readTrim("/proc/sys/user/max_user_namespaces") + "); the sandbox line says whether one can be made"
	}
	r.AppArmorUserNS = readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")

	// Before the sandbox test, which may change this process's cgroup (the
	// systemd scope backend moves hutch into a scope of its own).
	r.Cgroup = cgroup.Probe()

	// The real test: make a sandbox and run a command in it (this also
	// proves the pid namespace's /proc mount, pivot_root, Landlock and
	// seccomp loading).
	dir, _ := os.MkdirTemp("", "hutch-doctor-")
	defer os.RemoveAll(dir)
	r.Sandbox, r.CanSandbox = doctorRun(ctx, policy.IsolationNamespaces, dir)

	r.LandlockSandbox, r.CanSandboxNoNS = doctorRun(ctx, policy.IsolationLandlock, dir)
	r.LandlockLimits = plan.LandlockDifferences

	st := landlock.Probe()
	r.LandlockABI = st.ABI
	if st.ABI == 0 {
		r.Landlock = "unavailable: " + st.Reason
	} else {
		var have, miss []string
		for _, f := range st.Features {
			if f.Available {
				have = append(have, f.Name)
			} else {
				miss = append(miss, fmt.Sprintf("%s (ABI %d, Linux %s)", f.Name, f.ABI, f.Linux))
			}
		}
		r.Landlock = fmt.Sprintf("ABI %d: %s", st.ABI, strings.Join(have, ", "))
		if len(miss) > 0 {
			r.Landlock += "; missing: " + strings.Join(miss, ", ")
		}
	}
	if v, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		r.Seccomp = "unavailable: " + err.Error()
	} else {
		r.Seccomp = fmt.Sprintf("available (this process's mode %d)", v)
	}
	if ok, why := seccompprofiles.NotifyAvailable(); ok {
		r.SeccompNotify = "available: denials and direct connections are logged"
	} else {
		r.SeccompNotify = "unavailable: denials are enforced but not logged (" + why + ")"
	}
	r.Overlayfs = probeReview(ctx, r.CanSandbox)
	switch readTrim("/proc/sys/dev/tty/legacy_tiocsti") {
	case "0":
		r.TIOCSTI = "disabled by the kernel (dev.tty.legacy_tiocsti = 0); the seccomp profile denies it too"
	case "1":
		r.TIOCSTI = "enabled in the kernel (dev.tty.legacy_tiocsti = 1); the seccomp profile denies it"
	default:
		r.TIOCSTI = "no sysctl (older kernel); the seccomp profile denies it"
	}
	r.MCPServer = mcpServerStatus()
	r.Container = diagnoseContainer(r.CanSandbox)
	r.Images = imagesStatus()

	// Per policy area.
	if !r.CanSandbox {
		for _, a := range []string{"FILESYSTEM", "RESOURCES", "NETWORK", "LIFECYCLE"} {
			r.Areas[a] = "not enforced: no sandbox can be made here (the sandbox line says why)"
		}
		return r
	}
	fs := "enforced: private mount namespace with a read-only tooling tree, the workspace, tmpfs scratch"
	if st.ABI >= 1 {
		fs += fmt.Sprintf(", plus Landlock ABI %d", st.ABI)
	} else {
		fs = "partly: mount namespace only; Landlock unavailable (" + st.Reason + ")"
	}
	r.Areas["FILESYSTEM"] = fs
	switch b := r.Cgroup.Backend; b {
	case cgroup.BackendRlimit, "":
		r.Areas["RESOURCES"] = fmt.Sprintf("partly: no usable cgroup, so hutch watches memory: every %s it sums the sandbox's memory and kills the largest process above the limit (an allocation faster than that runs ahead of it by what it allocates in %s); processes are capped exactly by RLIMIT_NPROC per user namespace, which records no refused fork: a fork bomb is reported when a look finds the limit reached or the command leaves a tree at the limit behind, so one that collapses on its own within %s may not be; cpus are not limited; file size, open files, tmpfs sizes and the timeout are enforced. Fix: %s",
			policy.Duration(plan.WatchInterval), policy.Duration(plan.WatchInterval), policy.Duration(plan.WatchInterval), r.Cgroup.Reason)
	default:
		where := strings.Join(r.Cgroup.Where, ", ")
		if where == "" {
			where = r.Cgroup.Reason
		}
		r.Areas["RESOURCES"] = fmt.Sprintf("enforced: %s (%s), controllers %s: exact, the kernel charges every page to the memory limit and refuses every fork beyond the process limit, and counts OOM kills and refused forks; file size, open files, tmpfs sizes and the timeout too", b, where, strings.Join(r.Cgroup.Controllers, ", "))
	}
	net := "enforced: network namespace with loopback only; egress only through hutch's allowlisting proxy"
	if st.ABI >= 4 {
		net += "; Landlock limits TCP connect to the proxy"
	} else {
		net += "; Landlock cannot restrict TCP here (needs ABI 4)"
	}
	r.Areas["NETWORK"] = net
	r.Areas["LIFECYCLE"] = "enforced: parent-death signal and pid namespace (nothing survives hutch); per-command reaper for session commands"
	return r
}

func printDoctor(r *doctorReport) {
	fmt.Printf("hutch doctor: kernel %s, uid %d\n\n", r.Kernel, r.UID)
	row := func(k, v string) { fmt.Printf("  %-18s %s\n", k, v) }
	row("sandbox", r.Sandbox)
	row("user namespaces", r.UserNS)
	if r.AppArmorUserNS != "" {
		row("apparmor userns", "kernel.apparmor_restrict_unprivileged_userns = "+r.AppArmorUserNS)
	}
	row("cgroup", fmt.Sprintf("%s; backend %s", r.Cgroup.Mode, r.Cgroup.Backend))
	if len(r.Cgroup.Controllers) > 0 {
		in := ""
		if len(r.Cgroup.Where) > 0 {
			in = " in " + strings.Join(r.Cgroup.Where, ", ")
		}
		row("", "controllers: "+strings.Join(r.Cgroup.Controllers, ", ")+in)
	}
	if r.Cgroup.Backend == cgroup.BackendRlimit {
		for _, rj := range r.Cgroup.Rejected {
			row("", fmt.Sprintf("not %s: %s", rj.Backend, rj.Reason))
		}
	}
	row("landlock", r.Landlock)
	row("landlock isolation", r.LandlockSandbox+" (sandbox.isolation = \"landlock\", or \"auto\" where namespaces cannot be made)")
	if r.CanSandboxNoNS {
		for _, d := range r.LandlockLimits {
			row("", "unlike namespaces: "+d)
		}
	}
	row("seccomp", r.Seccomp)
	row("seccomp notify", r.SeccompNotify)
	row("overlayfs", r.Overlayfs)
	row("TIOCSTI", r.TIOCSTI)
	row("images", r.Images)
	row("hutch mcp", r.MCPServer)
	printContainer(row, r.Container)
	fmt.Println("\nwhat a sandbox gets here:")
	for _, a := range []string{"FILESYSTEM", "RESOURCES", "NETWORK", "LIFECYCLE"} {
		row(a, r.Areas[a])
	}
}

// doctorRun makes a sandbox with isolation iso (workspace dir) and runs
// `true` in it: "ok", or why not.
func doctorRun(ctx context.Context, iso, dir string) (string, bool) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devnull.Close()
	p := policy.Default()
	p.Network.DiscoverRegistries = false
	p.Filesystem.Workspace = dir
	p.Filesystem.Protected = nil
	p.Filesystem.DefaultCaches = false // a throwaway workspace: no caches to leave behind
	p.Sandbox.Isolation = iso
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := hutch.Run(cctx, &hutch.RunOptions{Policy: p, Argv: []string{"true"}, Stdin: devnull, Stdout: devnull, Stderr: devnull})
	switch {
	case err != nil:
		return "cannot be made: " + err.Error(), false
	case res.ExitCode != 0:
		return fmt.Sprintf("made, but `true` exited %d: %s", res.ExitCode, strings.Join(res.Messages, "; ")), false
	}
	return "ok", true
}
