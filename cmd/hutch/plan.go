package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/store"
)

// planCommand prints the sandbox that `hutch run` with the same flags would
// set up, without making it.
func planCommand() *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "print the sandbox that hutch run with these flags would set up, without running anything",
		ArgsUsage: "[--] [COMMAND [ARG...]]",
		Flags: append(policyFlags(),
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` inside, or pass K through from the caller (repeatable)"},
			&cli.StringFlag{Name: "cwd", Usage: "working `DIR` inside (relative to /workspace)"},
			&cli.StringFlag{Name: "security-log", Usage: "the security log `FILE` run would append to (kept read-only when in the workspace)"},
			&cli.BoolFlag{Name: "json", Usage: "print the whole plan as JSON"},
		),
		Action: func(c *cli.Context) error {
			p, err := effectivePolicy(c, policy.WorkspaceAtFixed)
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
			}
			logPath := c.String("security-log")
			if logPath == "" {
				logPath = seclog.DefaultPath()
			}
			var req *plan.Request
			if c.NArg() > 0 {
				req = &plan.Request{Argv: c.Args().Slice(), Cwd: c.String("cwd"), HostCwd: hostCwd(), ExtraEnv: c.StringSlice("env")}
			}
			h, err := plan.Gather(p, plan.GatherOptions{Env: os.Environ(), SecurityLog: logPath, ProbeUserns: nsjail.ProbeUserNamespacesOnce(store.Open()), ProbeOverlay: nsjail.ProbeOverlay})
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: cannot plan the sandbox: " + err.Error()}
			}
			sb, err := plan.Build(p, h, req)
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: cannot plan the sandbox: " + err.Error()}
			}
			if c.Bool("json") {
				b, err := json.MarshalIndent(sb, "", "  ")
				if err != nil {
					return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
				}
				fmt.Println(string(b))
				return nil
			}
			printPlan(os.Stdout, sb)
			return nil
		},
	}
}

// printPlan writes the plan for people: one section per part of the
// sandbox, in the order the sandbox is made.
func printPlan(w io.Writer, sb *plan.Sandbox) {
	sec := func(name, format string, a ...any) { fmt.Fprintf(w, "%-10s %s\n", name, fmt.Sprintf(format, a...)) }
	item := func(format string, a ...any) { fmt.Fprintf(w, "%-10s   %s\n", "", fmt.Sprintf(format, a...)) }
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ", ")
	}
	ws := sb.Workspace
	sec("workspace", "%s at %s, read-write", ws.Host, ws.Mount)
	item("read-only inside: %s", list(ws.Protected))
	if len(ws.Hidden) > 0 {
		item("hidden (hutch's own directories): %s", list(ws.Hidden))
	}
	var repos []string
	for _, r := range ws.Repos.Repos {
		repos = append(repos, r.Dot)
	}
	item("git repositories (their configuration and hooks read-only): %s (%d directories looked through%s)", list(repos), ws.Repos.Dirs, map[bool]string{true: "", false: ", not all"}[ws.Repos.Complete])
	if len(ws.Missing) > 0 {
		item("missing, reported if a command creates them: %s", list(ws.Missing))
	}
	for _, u := range ws.Unprotected {
		item("not protected: %s", u)
	}
	if im := sb.Image; im != nil {
		if im.Layers > 0 {
			sec("image", "%s (%s): its root read-only overlays of its %d layers (docs/IMAGES.md)", im.Ref, im.Digest, im.Layers)
		} else {
			sec("image", "%s (%s): its root the flattened copy %s, bound read-only: %s", im.Ref, im.Digest, im.Root, im.Flattened)
		}
	}
	id := sb.Identity
	if sb.Isolation == policy.IsolationLandlock {
		sec("isolation", "landlock: no namespaces; the host's filesystem, processes and network, restricted by Landlock and seccomp (docs/ISOLATION.md); unlike namespaces:")
		for _, d := range sb.Differences {
			item("%s", d)
		}
		sec("identity", "the invoking user (uid %d gid %d), HOME and TMPDIR in a private scratch directory made at launch; no capabilities, no_new_privs", id.UID, id.GID)
		sec("mounts", "none")
	} else {
		sec("identity", "uid %d gid %d (%s), HOME %s, hostname %s; no capabilities, no_new_privs", id.UID, id.GID, id.User, id.Home, id.Hostname)
		sec("mounts", "a new root (tmpfs, %s, read-only once built), built on the host's %s:", cgroup.FormatBytes(sb.Mounts.RootSize), sb.Mounts.Stage)
	}
	for _, s := range sb.Mounts.Steps {
		item("%s", describeStep(s))
	}
	if len(sb.Caches) == 0 {
		sec("caches", "none (filesystem.default_caches finds no toolchain of a built-in cache, or they are off: --no-cache)")
	} else {
		sec("caches", "persistent, read-write, in hutch's cache directory (docs/CACHES.md; hutch cache ls):")
		for _, c := range sb.Caches {
			item("%s -> %s: %s", c.Dir, c.Target, c.Why)
			if len(c.Env) > 0 {
				item("  %s", strings.Join(c.Env, " "))
			}
		}
	}
	ll := sb.Landlock
	r := ll.Rules
	if ll.ABI == 0 {
		sec("landlock", "not available on this kernel")
	} else {
		sec("landlock", "ABI %d, every command:", ll.ABI)
	}
	item("read+execute: %s", list(r.ReadExec))
	item("read: %s; list: %s", list(r.ReadOnly), list(r.ListOnly))
	item("read-write: %s; files: %s", list(r.ReadWrite), list(r.ReadWriteFiles))
	item("TCP connect: %s; TCP bind: %s", ports(r.ConnectTCP), ports(r.BindTCP))
	var scopes []string
	if r.ScopeSignal {
		scopes = append(scopes, "signals")
	}
	if r.ScopeAbstractUnix {
		scopes = append(scopes, "abstract unix sockets")
	}
	item("scoped to the sandbox: %s", list(scopes))
	for _, g := range ll.NotEnforced {
		item("not enforced: %s", g)
	}
	sc := sb.Seccomp
	notify := "denials reported (user notification)"
	if !sc.Notify {
		notify = "denials enforced, not reported: " + sc.NotifyUnavailable
	}
	sec("seccomp", "profile %s; %s; direct connections watched: %v", sc.Profile, notify, sc.WatchNetwork)
	if sc.Ptrace {
		item("ptrace and process_vm_* allowed among a command's own processes (seccomp.ptrace)")
	}
	res := sb.Resources
	sec("resources", "backend %s: %s", res.Backend, res.BackendReason)
	l := res.Limits
	who := "the command"
	if res.Shared {
		who = "the session's commands together"
	}
	item("memory %s, pids %d, cpus %g: %s", cgroup.FormatBytes(l.MemoryBytes), l.Pids, l.CPUs, who)
	if res.Cgroup != nil {
		item("cgroup: memory %s, pids %d (%d of them for hutch's own processes), cpus %g", cgroup.FormatBytes(res.Cgroup.MemoryBytes), res.Cgroup.Pids, res.PidsMargin, res.Cgroup.CPUs)
	}
	var rls []string
	for _, rl := range res.Rlimits {
		rls = append(rls, rl.String())
	}
	item("every command: %s", list(rls))
	if len(res.Fallback) > 0 {
		rls = rls[:0]
		for _, rl := range res.Fallback {
			rls = append(rls, rl.String())
		}
		what := "without a cgroup"
		if res.Cgroup == nil {
			what = "in place of a cgroup"
		}
		item("%s: %s", what, list(rls))
	}
	if w := res.Watchdog; w != nil {
		what := "without a cgroup"
		if res.Cgroup == nil {
			what = "in place of a cgroup"
		}
		does := []string{fmt.Sprintf("looks every %s while a command runs (every %s otherwise)", w.Interval, w.IdleInterval)}
		if w.MemoryBytes > 0 {
			does = append(does, "kills the largest process when the sandbox's memory exceeds "+cgroup.FormatBytes(w.MemoryBytes))
		}
		if w.Nproc > 0 {
			does = append(does, fmt.Sprintf("reports RLIMIT_NPROC %d reached when it finds it so", w.Nproc))
		}
		item("%s, a watchdog: %s", what, strings.Join(does, "; "))
	}
	n := sb.Network
	if n.Proxy == nil {
		sec("network", "%s: loopback only, no way out", n.Mode)
	} else if sb.Isolation == policy.IsolationLandlock {
		sec("network", "%s: the host's network; TCP connect only to hutch's proxy on ephemeral ports of the host's 127.0.0.1 (chosen at launch), no other socket", n.Mode)
	} else {
		sec("network", "%s: loopback only; egress through hutch's proxy on 127.0.0.1:%d (HTTP), :%d (SOCKS5); DNS on :%d refused", n.Mode, n.Proxy.HTTP, n.Proxy.SOCKS, n.Proxy.DNS)
		for _, a := range n.Allow {
			item("allow %s ports %v: %s", a.Host, a.Ports, a.Reason)
		}
		if n.DiscoverRegistries {
			item("allow the package registries the host's tools use (discovered at the first connection)")
		}
	}
	for _, pub := range n.Publish {
		item("published: host %s -> the sandbox's loopback port %d (every connection logged)", net.JoinHostPort(pub.HostAddress, strconv.Itoa(pub.HostPort)), pub.SandboxPort)
	}
	if sb.Process.Spawner {
		sec("process", "a session's later commands start from a spawner (restrictions applied once)")
	} else {
		sec("process", "every command applies its restrictions itself: %s", sb.Process.NoSpawner)
	}
	lc := sb.Lifecycle
	sec("lifecycle", "timeout %s per command; a session ends after %s idle, %s in all", lc.Timeout, lc.SessionIdle, lc.SessionMax)
	if cmd := sb.Command; cmd != nil {
		sec("command", "%s", strings.Join(cmd.Argv, " "))
		item("in %s", cmd.Cwd)
		env := slices.Clone(cmd.Env)
		item("environment: %s", strings.Join(env, " "))
	}
	for _, wn := range sb.Warnings {
		sec("warning", "%s", wn.Message)
	}
}

func ports(p []uint16) string {
	if len(p) == 0 {
		return "none"
	}
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}

// describeStep is one mount step in words.
func describeStep(s mounts.Step) string {
	var b strings.Builder
	b.WriteString(string(s.Kind))
	switch s.Kind {
	case mounts.Bind:
		if s.ReadOnly {
			b.WriteString(" (read-only)")
		}
		fmt.Fprintf(&b, " %s -> %s", s.Source, s.Target)
	case mounts.Symlink:
		fmt.Fprintf(&b, " %s -> %s", s.Target, s.Data)
	case mounts.Tmpfs:
		fmt.Fprintf(&b, " %s (%s, mode %o)", s.Target, cgroup.FormatBytes(s.Size), s.Mode)
	case mounts.File:
		fmt.Fprintf(&b, " %s (%d bytes)", s.Target, len(s.Data))
	default:
		fmt.Fprintf(&b, " %s", s.Target)
	}
	if s.Why != "" {
		fmt.Fprintf(&b, ": %s", s.Why)
	}
	return b.String()
}
