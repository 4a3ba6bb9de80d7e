package imagebuild

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/images"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
)

// Sandbox runs run steps in hutch sandboxes (hutch.Run): the parent
// image's root (its layers, or its flattened copy: stepRoot), each of its
// top-level directories the lower layer (or layers) of an overlay whose
// upper directory collects the step's writes (mounts.Spec.Build), the
// command uid 0 with CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER in its own
// one-id user namespace, chown without effect, the network only through
// the egress proxy with the spec's allowlist, every other protection as in
// hutch run. The upper directory becomes the step's layer (upperLayer).
type Sandbox struct {
	Store *images.Store
	// Exe is the hutch binary ("" = /proc/self/exe).
	Exe string
	// Out receives the commands' output.
	Out io.Writer
	// SpecFile names the spec in the allowlist's reasons.
	SpecFile string
	// Env is hutch's environment (os.Environ() for the CLI): its
	// HUTCH_IMAGE_ROOT (plan.ImageRootEnv) chooses a step's root as it
	// chooses hutch run's.
	Env []string
	// ProbeOverlay is nsjail.ProbeOverlay (plan.ImageRootForm): where it
	// finds that overlayfs mounts here, a step's root is overlays of the
	// parent's layers. Nil: the parent's flattened copy.
	ProbeOverlay func(lower1, lower2 string) string
}

// aptConf is what apt gets in a run step (APT_CONFIG): apt runs its
// downloads as root, since the step's user namespace has no _apt user to
// switch to (one id is mapped).
const aptConf = "APT::Sandbox::User \"root\";\n"

// Run is a RunFunc.
func (sx *Sandbox) Run(ctx context.Context, parent *images.Image, s Step, allow []string) (string, error) {
	var layer string
	err := sx.in(ctx, parent, s.Command, allow, sx.Out, func(upper string) (err error) {
		layer, err = upperLayer(filepath.Join(sx.Store.Dir, "tmp"), upper)
		return err
	})
	return layer, err
}

// versionsScript prints "KIND VERSION" lines: dpkg's packages, the Go,
// Node and Python toolchains, where the image has them.
const versionsScript = `command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W -f '${Package}=${Version}\n' | while read -r l; do echo "dpkg $l"; done
command -v go >/dev/null 2>&1 && echo "go $(go version)"
command -v node >/dev/null 2>&1 && echo "node $(node --version)"
command -v python3 >/dev/null 2>&1 && echo "python3 $(python3 --version 2>&1)"
true`

// Versions runs versionsScript on img (its writes discarded) and returns
// the versions by kind (Lock.Installed).
func (sx *Sandbox) Versions(ctx context.Context, img *images.Image) (map[string][]string, error) {
	var b strings.Builder
	if err := sx.in(ctx, img, versionsScript, nil, &b, nil); err != nil {
		return nil, fmt.Errorf("the installed versions: %w", err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			out[k] = append(out[k], v)
		}
	}
	return out, nil
}

// in runs script in a build sandbox on parent, then done on the upper
// directory (nil: discarded).
func (sx *Sandbox) in(ctx context.Context, parent *images.Image, script string, allow []string, out io.Writer, done func(upper string) error) error {
	tmp, err := os.MkdirTemp(filepath.Join(sx.Store.Dir, "tmp"), "build-run-")
	if err != nil {
		return err
	}
	defer removeAll(tmp)
	b, err := sx.stepRoot(parent, tmp)
	if err != nil {
		return err
	}
	// The workspace, an empty scratch directory outside hutch's own (a
	// workspace there is refused), and apt's configuration: not captured.
	scratch, err := os.MkdirTemp("", "hutch-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	ws := filepath.Join(scratch, "workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(scratch, "apt.conf"), []byte(aptConf), 0o644); err != nil {
		return err
	}
	p, err := stepPolicy(parent, ws, allow, sx.SpecFile)
	if err != nil {
		return err
	}
	p.Filesystem.ReadOnly = []policy.Bind{{Source: filepath.Join(scratch, "apt.conf"), Target: "/run/hutch-build/apt.conf"}}
	p.Environment.Set["APT_CONFIG"] = "/run/hutch-build/apt.conf"
	if wd := parent.Config.Config.WorkingDir; wd != "" {
		script = "cd '" + strings.ReplaceAll(wd, "'", `'\''`) + "' || exit 1\n" + script
	}
	outF, closeOut, err := asFile(out)
	if err != nil {
		return err
	}
	res, err := hutch.Run(ctx, &hutch.RunOptions{
		Policy: p, Argv: []string{"/bin/sh", "-c", script}, Executable: sx.Exe,
		Stdout: outF, Stderr: outF, Build: b,
	})
	closeOut()
	if err != nil {
		return fmt.Errorf("the step's sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		msg := ""
		if len(res.Messages) > 0 {
			msg = " (" + strings.Join(res.Messages, "; ") + ")"
		}
		return fmt.Errorf("the command exited with status %d%s", res.ExitCode, msg)
	}
	if done == nil {
		return nil
	}
	return done(b.Upper)
}

// stepRoot is the root of a build step on parent, its writable layer in
// tmp (upper/ and work/, with a directory each for every top-level
// directory of the root, made here). The overlays' lower layers are
// parent's root as hutch run would have it (plan.ImageRoot with sx.Env
// and sx.ProbeOverlay): its layers, or its flattened copy. Either way the
// step sees the same tree and its writes land in upper/ alike, so its
// layer does not depend on which.
func (sx *Sandbox) stepRoot(parent *images.Image, tmp string) (*mounts.BuildRoot, error) {
	b := &mounts.BuildRoot{Upper: filepath.Join(tmp, "upper"), Work: filepath.Join(tmp, "work")}
	var err error
	if b.Root, b.Layers, _, err = plan.ImageRoot(sx.Store, parent, sx.Env, sx.ProbeOverlay); err != nil {
		return nil, fmt.Errorf("the step's root: %w", err)
	}
	dirs, err := b.Dirs(nil)
	if err != nil {
		return nil, fmt.Errorf("the step's root: %w", err)
	}
	for _, fi := range dirs {
		d := fi.Name()
		for _, p := range []string{filepath.Join(b.Upper, d), filepath.Join(b.Work, d)} {
			if err := os.MkdirAll(p, 0o700); err != nil {
				return nil, fmt.Errorf("the step's layer: %w", err)
			}
		}
		// The upper directory's mode is the merged directory's (as Dirs
		// reads it: with Layers, the topmost layer's).
		if err := os.Chmod(filepath.Join(b.Upper, d), fi.Mode().Perm()|fi.Mode()&os.ModeSticky); err != nil {
			return nil, fmt.Errorf("the step's layer: %w", err)
		}
	}
	return b, nil
}

// stepPolicy is a run step's policy: hutch's default with the workspace
// ws (an empty scratch directory, not captured), the image's environment,
// and the build's allowlist through the egress proxy.
func stepPolicy(parent *images.Image, ws string, allow []string, specFile string) (*policy.Policy, error) {
	p := policy.Default()
	p.Filesystem.Workspace = ws
	p.Filesystem.WorkspaceAt = "/workspace"
	p.Filesystem.DefaultCaches = false // a cache's mount point would be in the layer
	p.Filesystem.Cache = nil
	p.Environment.Pass = nil
	p.Environment.Set = map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range parent.Config.Config.Env {
		if k, v, ok := strings.Cut(e, "="); ok {
			p.Environment.Set[k] = v
		}
	}
	delete(p.Environment.Set, "HOME") // the sandbox's: the image's /root
	// The spec's allowlist alone: not the registries of the host's tools.
	p.Network.DiscoverRegistries = false
	p.Network.Allow = nil
	for _, a := range allow {
		host, port, err := hostPort(a)
		if err != nil {
			return nil, fmt.Errorf("network.allow: %w", err)
		}
		p.Network.Allow = append(p.Network.Allow, policy.AllowEntry{Host: host, Ports: []int{port}, Reason: "image build " + specFile})
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("the step's policy: %w", err)
	}
	return p, nil
}

// asFile gives out as an *os.File for the sandbox's streams: itself, or a
// pipe copied to it.
func asFile(out io.Writer) (*os.File, func(), error) {
	if f, ok := out.(*os.File); ok {
		return f, func() {}, nil
	}
	if out == nil {
		out = io.Discard
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { io.Copy(out, r); r.Close(); close(done) }()
	return w, func() { w.Close(); <-done }, nil
}

// removeAll removes a tree made by an overlay too: its work directories
// are left mode 0 by the kernel.
func removeAll(p string) {
	filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	os.RemoveAll(p)
}
