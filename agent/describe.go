package agent

import (
	"fmt"
	"strings"

	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
)

// DescribeOptions are what Describe says besides the policy.
type DescribeOptions struct {
	// Workspace is where the workspace is (Tool.Workspace); zero reads as
	// /workspace.
	Workspace policy.WorkspacePaths
	// MaxOutput is the output cap (0: DefaultMaxOutput).
	MaxOutput int
	// Session: calls share one sandbox (SessionExecutor); otherwise each
	// gets a fresh one (HutchExecutor).
	Session bool
}

// maxListedAllow bounds how many allowlist entries Describe names.
const maxListedAllow = 20

// Describe is the tool description an agent reads: what the sandbox is,
// what it reaches under p, the limits and how to read the result.
func Describe(p *policy.Policy, o DescribeOptions) string {
	if p == nil {
		p = policy.Default()
	}
	ws, maxOutput := o.Workspace, o.MaxOutput
	if maxOutput <= 0 {
		maxOutput = DefaultMaxOutput
	}
	var b strings.Builder
	b.WriteString("Run a shell command line (/bin/sh -c) in hutch, a rootless Linux sandbox, and get its stdout, stderr and exit code.\n\n")
	mount := ws.Mount
	if mount == "" {
		mount = policy.WorkspaceMount
	}
	switch {
	case ws.Host != "" && ws.Host == mount:
		fmt.Fprintf(&b, "Filesystem: the project is mounted read-write at its own host path, %s, so paths are the same inside and out; it is the default working directory (cwd is relative to it, or an absolute path inside it)", mount)
	case ws.Host != "":
		fmt.Fprintf(&b, "Filesystem: the project (%s on the host) is mounted read-write at %s, the default working directory (cwd is relative to it, or an absolute path inside it; a host path under %s means the same directory)", ws.Host, mount, ws.Host)
	default:
		fmt.Fprintf(&b, "Filesystem: the project is mounted read-write at %s, the default working directory (cwd is relative to it and must stay inside it)", mount)
	}
	if len(p.Filesystem.Protected) > 0 {
		fmt.Fprintf(&b, ", except %s, which stay read-only", strings.Join(p.Filesystem.Protected, ", "))
	}
	b.WriteString(". ")
	if p.Filesystem.Review {
		b.WriteString("Review mode: your writes to the project do not reach the user's files; they wait in a change set that the user reviews and applies (each result's pending_changes lists it). Applying is the user's step, not yours: do not try to apply, copy or work around it. ")
	}
	_, image := p.Filesystem.ImageRef()
	if _, rootfs := p.Filesystem.RootfsDir(); rootfs || image {
		b.WriteString("The rest of the filesystem is a read-only image; ")
	} else {
		b.WriteString("The host's tools (/usr, /bin, /lib, /opt) are read-only; ")
	}
	switch p.Sandbox.Isolation {
	case policy.IsolationLandlock:
		b.WriteString("HOME and TMPDIR are a private writable scratch directory; /tmp is not writable. ")
		b.WriteString("This sandbox is made without namespaces (isolation landlock), so: " + strings.Join(plan.LandlockDifferences, "; ") + ". ")
	case policy.IsolationAuto:
		b.WriteString("/tmp and HOME (/home/sandbox) are private and writable (where this host cannot make namespaces, the sandbox is made with Landlock only: results then carry isolation and isolation_limits, which say what differs). ")
	default:
		b.WriteString("/tmp and HOME (/home/sandbox) are private and writable. ")
	}
	if p.Sandbox.Isolation != policy.IsolationLandlock && (p.Filesystem.DefaultCaches || len(p.Filesystem.Cache) > 0) {
		b.WriteString("The package and build caches in HOME (Go's, npm's, pip's and the like, of the tools installed) persist across sandboxes of this project, so a second build or install is fast. ")
	}
	if o.Session {
		fmt.Fprintf(&b, "Calls share one sandbox while the server runs: files under %s, /tmp and HOME persist between calls; each call's processes end with it; fresh: true runs a call in a new one-off sandbox. Standard input is empty.\n\n", mount)
	} else {
		fmt.Fprintf(&b, "Each call gets a fresh sandbox: only files written under %s persist between calls; /tmp, HOME and background processes do not. Standard input is empty.\n\n", mount)
	}
	switch p.Network.Mode {
	case policy.NetNone:
		b.WriteString("Network: none. Nothing outside the sandbox is reachable (package installs and downloads fail).\n\n")
	default:
		b.WriteString("Network: default deny. Only allowlisted destinations are reachable, through hutch's egress proxy (HTTP_PROXY/HTTPS_PROXY are set for the command)")
		var hosts []string
		for _, a := range p.Network.Allow {
			ports := a.Ports
			if len(ports) == 0 {
				ports = []int{policy.DefaultPort}
			}
			for _, port := range ports {
				hosts = append(hosts, fmt.Sprintf("%s:%d", a.Host, port))
			}
		}
		if len(hosts) > maxListedAllow {
			hosts = append(hosts[:maxListedAllow], fmt.Sprintf("and %d more", len(hosts)-maxListedAllow))
		}
		switch {
		case len(hosts) > 0 && p.Network.DiscoverRegistries:
			fmt.Fprintf(&b, ": %s, and the package registries the host's tools are configured to use", strings.Join(hosts, ", "))
		case len(hosts) > 0:
			fmt.Fprintf(&b, ": %s", strings.Join(hosts, ", "))
		case p.Network.DiscoverRegistries:
			b.WriteString(": the package registries the host's tools are configured to use")
		default:
			b.WriteString(": none are allowlisted")
		}
		b.WriteString(". Everything else is refused.\n\n")
	}
	b.WriteString("policy_events lists what the sandbox blocked in this call, as 'hutch: ...' lines, e.g. 'hutch: network blocked by policy: destination example.com:443 not allowlisted (1 attempt)'. ")
	b.WriteString("These are policy decisions, not transient failures: do not retry or work around them; tell the user what was blocked and ask them to change the policy if the task needs it.\n\n")
	fmt.Fprintf(&b, "Limits: timeout_seconds defaults to, and may not exceed, %d (the policy's timeout); then every process of the command is killed. ",
		int64(p.Resources.Timeout.D().Seconds()))
	fmt.Fprintf(&b, "stdout and stderr are each capped at %s; the rest is dropped and the kept part ends with '[hutch: output truncated: N bytes dropped]' (stdout_truncated/stderr_truncated are set), so filter long output (| tail -n 100, | grep).\n\n",
		sizeText(maxOutput))
	b.WriteString("Exit codes: the command's own; 128+N killed by signal N; 124 timed out (timed_out is true); 125 sandbox error or cancelled; 126 cannot execute; 127 command not found. ")
	b.WriteString("A non-zero exit is a normal result, not a tool error.")
	return b.String()
}

func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
