// Command hutch runs untrusted code in a rootless sandbox.
//
//	hutch run [flags] -- COMMAND [ARG...]
//	hutch policy show [flags]
//	hutch policy check FILE
//
// Exit status of `hutch run`: the command's own; 128+N when it was killed
// by signal N; 124 when the wall-clock timeout ended it; 125 when hutch
// could not set up the sandbox (or was used wrongly); 126 when the command
// cannot be executed; 127 when it was not found.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/egress"
	// The C fast path of `hutch exec` (a constructor; see its package doc).
	_ "github.com/hutchsandbox/hutch/execclient"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/nsjail/prestart"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/store"
)

// version is set by the linker (-X main.version=...).
var version = "dev"

func main() {
	mainStarted = monotonic()
	os.Exit(run(os.Args))
}

// mainStarted is when main began (CLOCK_MONOTONIC), for --debug: with the
// prestarted init's clone time (the process's first instructions) it
// splits the time before hutch.Run into the Go runtime's start and the CLI.
var mainStarted time.Duration

func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// exitError carries an exit status with its message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func run(args []string) int {
	// The init the C constructor may have started for `hutch run` is
	// adopted by the run action; on every other path (a usage error
	// before the action, another command) it is ended and reaped here.
	defer func() { prestart.Take().Discard() }()
	app := newApp()
	err := app.RunContext(context.Background(), args)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "hutch: "+err.Error())
	return hutch.ExitSetup
}

func newApp() *cli.App {
	app := newAppUncached()
	cacheFlagNames(app.Commands)
	handleUsage(app)
	return app
}

// newAppUncached is the CLI as declared, before cacheFlagNames.
func newAppUncached() *cli.App {
	return &cli.App{
		Name:                 "hutch",
		Usage:                "run untrusted code in a rootless sandbox",
		Version:              version,
		HideHelpCommand:      true,
		EnableBashCompletion: false,
		ExitErrHandler:       func(*cli.Context, error) {},
		Commands:             append([]*cli.Command{runCommand(), execCommand(), sessionCommand(), mcpCommand(), planCommand(), doctorCommand(), policyCommand(), seccompCommand(), cacheCommand(), imageCommand()}, reviewCommands()...),
	}
}

// policyFlags are the flags that shape the effective policy; run and policy
// show share them.
func policyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "policy", Usage: "policy `FILE` (TOML); default: the built-in policy (docs/POLICY.md)"},
		&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}, Usage: "host `DIR` mounted read-write inside, at /workspace or --workspace-at (default: current directory)"},
		&cli.StringFlag{Name: "workspace-at", Usage: "where the workspace appears inside: /workspace, or host (its own host path; the default of hutch mcp)"},
		&cli.StringFlag{Name: "tooling", Usage: "read-only tooling tree: host, rootfs:`DIR` or image:REF"},
		imageFlag,
		&cli.StringFlag{Name: "timeout", Usage: "wall-clock limit per execution, e.g. 30s, 10m"},
		&cli.StringSliceFlag{Name: "ro-bind", Usage: "extra read-only bind `SRC[:DST]` (repeatable)"},
		&cli.StringFlag{Name: "net", Usage: "network mode: proxy (default deny, allowlist through the egress proxy) or none"},
		&cli.StringFlag{Name: "tmp-size", Usage: "size cap of /tmp, e.g. 512MiB"},
		&cli.StringFlag{Name: "memory", Usage: "memory limit of the sandbox, e.g. 512MiB (no swap)"},
		&cli.IntFlag{Name: "pids", Usage: "process and thread limit of the sandbox"},
		&cli.Float64Flag{Name: "cpus", Usage: "CPU cores the sandbox may use, e.g. 0.5"},
		&cli.StringFlag{Name: "seccomp-profile", Usage: "Docker/OCI seccomp profile `FILE` instead of the built-in allowlist"},
		&cli.BoolFlag{Name: "allow-ptrace", Usage: "let debuggers and tracers (gdb, strace) trace a command's own processes (seccomp.ptrace, on by default; --allow-ptrace=false denies them)"},
		&cli.StringSliceFlag{Name: "allow", Usage: "allowlist `HOST[:PORT][=ADDR]` for this run (port default 443; =ADDR pins the name to that address; repeatable)"},
		&cli.BoolFlag{Name: "no-discover", Usage: "do not allowlist the package registries the host's tools are configured to use"},
		&cli.StringSliceFlag{Name: "publish", Usage: "forward the host's `[ADDR:]HOSTPORT:PORT` to PORT on the sandbox's loopback (ADDR default 127.0.0.1; repeatable)"},
		&cli.StringFlag{Name: "isolation", Usage: "how the sandbox is made: namespaces, landlock (no namespaces: Landlock, seccomp and rlimits only, for hosts without user namespaces; docs/ISOLATION.md) or auto"},
		&cli.BoolFlag{Name: "no-cache", Usage: "no persistent caches for this run: a cold start, as with filesystem.default_caches = false and no [[filesystem.cache]] (docs/CACHES.md)"},
		reviewFlag,
	}
}

// effectivePolicy loads the policy and applies flag overrides; it validates
// the result. Errors name the flag or file and key. workspaceAt is the
// command's default of filesystem.workspace_at, set when neither the file
// nor --workspace-at gives one ("" leaves it unset).
func effectivePolicy(c *cli.Context, workspaceAt string) (*policy.Policy, error) {
	p := policy.Default()
	if f := c.String("policy"); f != "" {
		lp, err := policy.Load(f)
		if err != nil {
			return nil, err
		}
		p = lp
	}
	fromFile := fromFile{len(p.Network.Allow), len(p.Filesystem.ReadOnly), len(p.Network.Publish)}
	if v := c.String("workspace"); v != "" {
		p.Filesystem.Workspace = v
	}
	if v := c.String("tooling"); v != "" {
		p.Filesystem.Tooling = v
	}
	if err := imageTooling(c, p); err != nil {
		return nil, err
	}
	if v := c.String("workspace-at"); v != "" {
		p.Filesystem.WorkspaceAt = v
	}
	if p.Filesystem.WorkspaceAt == "" {
		p.Filesystem.WorkspaceAt = workspaceAt
	}
	if d, err := timeoutFlag(c); err != nil {
		return nil, err
	} else if d > 0 {
		p.Resources.Timeout = policy.Duration(d)
	}
	if v := c.String("tmp-size"); v != "" {
		s, err := policy.ParseSize(v)
		if err != nil {
			return nil, fmt.Errorf("--tmp-size: %w", err)
		}
		p.Filesystem.TmpSize = s
	}
	if v := c.String("memory"); v != "" {
		s, err := policy.ParseSize(v)
		if err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
		p.Resources.Memory = s
	}
	if c.IsSet("pids") {
		p.Resources.Pids = c.Int("pids")
	}
	if c.IsSet("cpus") {
		p.Resources.CPUs = c.Float64("cpus")
	}
	if v := c.String("net"); v != "" {
		if v != policy.NetProxy && v != policy.NetNone {
			return nil, fmt.Errorf("--net %q: the network mode must be %q or %q", v, policy.NetProxy, policy.NetNone)
		}
		p.Network.Mode = v
	}
	if v := c.String("seccomp-profile"); v != "" {
		p.Seccomp.Profile = v
	}
	if c.IsSet("allow-ptrace") {
		p.Seccomp.Ptrace = c.Bool("allow-ptrace")
	}
	if v := c.String("isolation"); v != "" {
		p.Sandbox.Isolation = v
	}
	for _, a := range c.StringSlice("allow") {
		e, err := allowFlag(a)
		if err != nil {
			return nil, err
		}
		p.Network.Allow = append(p.Network.Allow, e)
	}
	if c.IsSet("review") {
		p.Filesystem.Review = c.Bool("review")
	}
	if c.Bool("no-discover") {
		p.Network.DiscoverRegistries = false
	}
	for _, v := range c.StringSlice("publish") {
		e, err := policy.ParsePublish(v)
		if err != nil {
			return nil, fmt.Errorf("--publish %q: %w", v, err)
		}
		p.Network.Publish = append(p.Network.Publish, e)
	}
	if c.Bool("no-cache") {
		p.Filesystem.DefaultCaches, p.Filesystem.Cache = false, nil
	}
	for _, b := range c.StringSlice("ro-bind") {
		src, dst, _ := strings.Cut(b, ":")
		if src == "" {
			return nil, fmt.Errorf("--ro-bind %q: want SRC or SRC:DST with absolute paths", b)
		}
		p.Filesystem.ReadOnly = append(p.Filesystem.ReadOnly, policy.Bind{Source: src, Target: dst})
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("current directory: %w", err)
	}
	if err := p.ResolvePaths(wd); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, nameFlags(c, err, fromFile)
	}
	// The sandbox reads the profile later; a device or a huge file must be
	// refused before anything is set up.
	if prof := p.Seccomp.Profile; prof != "" && prof != policy.SeccompDefault {
		if err := seccompprofiles.CheckFile(prof); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// timeoutFlag is --timeout of run and exec: 0 when not given; an error
// naming the flag and what is valid when it does not parse or is shorter
// than policy.MinTimeout.
func timeoutFlag(c *cli.Context) (time.Duration, error) {
	v := c.String("timeout")
	if !c.IsSet("timeout") {
		return 0, nil
	}
	d, err := policy.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--timeout: %w", err)
	}
	if err := policy.CheckTimeout(d); err != nil {
		return 0, fmt.Errorf("--timeout %s: %w", v, err)
	}
	return d.D(), nil
}

// allowFlag parses --allow HOST[:PORT][=ADDR[,ADDR]] (IPv6 literals in
// brackets); =ADDR pins HOST to those addresses.
func allowFlag(a string) (policy.AllowEntry, error) {
	e := policy.AllowEntry{Host: a, Reason: "command line (--allow)"}
	if dest, addrs, ok := strings.Cut(a, "="); ok {
		e.Addresses = strings.Split(addrs, ",")
		a, e.Host = dest, dest
	}
	host, port, err := net.SplitHostPort(a)
	if err == nil {
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 {
			return e, fmt.Errorf("--allow %q: port %q: want a number 1..65535", a, port)
		}
		e.Host, e.Ports = host, []int{n}
	} else if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		e.Host = strings.Trim(a, "[]")
	}
	if e.Host == "" {
		return e, fmt.Errorf("--allow %q: want HOST or HOST:PORT, e.g. pkgs.example.com:443", a)
	}
	return e, nil
}

func runCommand() *cli.Command {
	flags := append(policyFlags(),
		&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` inside, or pass K through from the caller (repeatable)"},
		&cli.StringFlag{Name: "cwd", Usage: "working `DIR` inside (relative to /workspace)"},
		&cli.BoolFlag{Name: "debug", Usage: "print per-stage timings and debug logs on stderr"},
		&cli.StringFlag{Name: "security-log", Usage: "append security events (JSON lines) to `FILE` (default: $XDG_STATE_HOME/hutch/security.log)"},
		jsonFlag,
	)
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command in a fresh sandbox",
		ArgsUsage: "[--] COMMAND [ARG...]",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			// The init the C constructor started (if it did): adopted by
			// the launch below, discarded on every other path.
			pre := prestart.Take()
			defer pre.Discard()
			if c.NArg() == 0 {
				return &exitError{hutch.ExitSetup, "hutch: no command given: usage: hutch run [flags] -- COMMAND [ARG...]"}
			}
			if err := envFlag(c); err != nil {
				return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
			}
			p, err := effectivePolicy(c, policy.WorkspaceAtFixed)
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
			}
			if err := ensureImage(c.Context, p); err != nil {
				return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
			}
			// The working directory, checked before anything is made: the
			// --cwd given, or the caller's own place in the workspace.
			wsHost, err := hutch.ResolveWorkspace(p.Filesystem.Workspace)
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: cannot set up the sandbox: " + err.Error()}
			}
			ws := p.Filesystem.PathsFor(wsHost, "")
			cwd := c.String("cwd")
			if cwd == "" {
				cwd = ws.HostCwd(hostCwd())
			} else if _, err := ws.Cwd(cwd); err != nil {
				return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
			}
			var logger *slog.Logger
			if c.Bool("debug") {
				logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
			} else {
				logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			seclogPath := c.String("security-log")
			if seclogPath == "" {
				seclogPath = seclog.DefaultPath()
			}
			var secLog *seclog.Log
			if seclogPath != "" {
				l, err := seclog.Open(seclogPath)
				if err != nil {
					return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
				}
				defer l.Close()
				secLog = l
			} else {
				fmt.Fprintln(os.Stderr, "hutch: warning: no security log (neither XDG_STATE_HOME nor HOME is set); pass --security-log FILE")
			}
			if c.Bool("json") {
				return runJSON(c, p, ws, cwd, secLog, logger)
			}
			cliDone := monotonic()
			res, err := hutch.Run(c.Context, &hutch.RunOptions{
				SecurityLog:    secLog,
				Policy:         p,
				Argv:           c.Args().Slice(),
				HostEnv:        os.Environ(),
				ExtraEnv:       c.StringSlice("env"),
				Cwd:            cwd,
				Stdin:          os.Stdin,
				Stdout:         os.Stdout,
				Stderr:         os.Stderr,
				ForwardSignals: true,
				Terminal:       true,
				Timing:         c.Bool("debug"),
				Logger:         logger,
				Prestarted:     pre,
			})
			if err != nil {
				return &exitError{hutch.ExitSetup, "hutch: cannot set up the sandbox: " + err.Error()}
			}
			timing := func(name string, d time.Duration) {
				fmt.Fprintf(os.Stderr, "hutch: timing %-22s %8.3f ms\n", name, float64(d)/1e6)
			}
			if c.Bool("debug") && pre != nil {
				timing("process.runtime", mainStarted-time.Duration(pre.Forked.Nano()))
				timing("process.cli", cliDone-mainStarted)
			}
			for _, t := range res.Timing {
				timing(t.Name, time.Duration(t.Usec)*time.Microsecond)
			}
			for _, m := range append(res.Messages, res.Warnings...) {
				fmt.Fprintln(os.Stderr, m)
			}
			if res.Review != nil {
				fmt.Fprintln(os.Stderr, res.Review.Message())
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode}
			}
			return nil
		},
	}
}

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "show or check sandbox policies",
		Subcommands: []*cli.Command{
			{
				Name:  "show",
				Usage: "print the effective policy (built-in default, --policy file and flags)",
				Flags: policyFlags(),
				Action: func(c *cli.Context) error {
					p, err := effectivePolicy(c, "")
					if err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
					b, err := p.Marshal()
					if err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
					os.Stdout.Write(b)
					if p.Network.Mode == policy.NetProxy && p.Network.DiscoverRegistries {
						ws, _ := hutch.ResolveWorkspace(p.Filesystem.Workspace)
						found := egress.DiscoverStored(c.Context, store.Open(), ws, true)
						fmt.Printf("\n# Discovered at run time (network.discover_registries = true): %d registries the\n# host's own tools are configured to use. Each is allowlisted with this reason.\n", len(found))
						for _, d := range found {
							fmt.Printf("# [[network.allow]] host = %q ports = %v reason = %q\n", d.Entry.Host, d.Entry.Ports, d.Entry.Reason)
						}
					}
					return nil
				},
			},
			{
				Name:      "check",
				Usage:     "validate a policy file as hutch run would here (the file, then the host: workspace, tooling, binds, seccomp profile, strict enforcement); exit 0 when valid, 1 with the problems otherwise",
				ArgsUsage: "FILE",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return &exitError{2, "hutch: usage: hutch policy check FILE"}
					}
					p, err := policy.Load(c.Args().First())
					if err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
					// Every check run makes before it starts anything: the
					// host facts and the plan (workspace, rootfs, bind
					// sources, strict enforcement), the seccomp profile.
					h, err := plan.Gather(p, plan.GatherOptions{Env: os.Environ(), ProbeUserns: nsjail.ProbeUserNamespacesOnce(store.Open()), ProbeOverlay: nsjail.ProbeOverlay})
					if err == nil {
						_, err = plan.Build(p, h, nil)
					}
					if err == nil {
						_, err = seccompprofiles.Load(c.Context, seccompprofiles.LoadOptions{Profile: p.Seccomp.Profile, Ptrace: p.Seccomp.Ptrace})
					}
					if err != nil {
						return &exitError{1, fmt.Sprintf("hutch: %s: valid as a file, but hutch run would refuse it here: %v", c.Args().First(), err)}
					}
					fmt.Printf("%s: valid\n", c.Args().First())
					return nil
				},
			},
		},
	}
}

func seccompCommand() *cli.Command {
	return &cli.Command{
		Name:  "seccomp",
		Usage: "inspect the seccomp profile",
		Subcommands: []*cli.Command{{
			Name:  "show",
			Usage: "print the effective seccomp rules (built-in default, --policy file or --seccomp-profile)",
			Flags: policyFlags(),
			Action: func(c *cli.Context) error {
				p, err := effectivePolicy(c, "")
				if err != nil {
					return &exitError{1, "hutch: " + err.Error()}
				}
				prof := seccompprofiles.Default()
				if name := p.Seccomp.Profile; name != "" && name != policy.SeccompDefault {
					if prof, err = seccompprofiles.LoadFile(name); err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
				}
				fmt.Print(seccompprofiles.Describe(prof))
				// What a run would refuse: a profile the exec stage cannot
				// run under, unknown names under strict enforcement.
				if _, err := seccompprofiles.Compile(prof, seccompprofiles.Options{Strict: p.Enforcement == policy.EnforceStrict}); err != nil {
					return &exitError{1, fmt.Sprintf("hutch: seccomp profile %s is refused: %v", prof.Source, err)}
				}
				return nil
			},
		}},
	}
}
