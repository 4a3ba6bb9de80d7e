package imagebuild

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/images"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

// SandboxRunner runs run steps in hutch sandboxes (hutch.Run): the
// parent image's flattened root, each of its top-level directories the
// lower layer of an overlay whose upper directory collects the step's
// writes (mounts.Spec.Build), the network only through the egress proxy
// with the spec's allowlist, every other protection as in hutch run. The
// upper directory becomes the step's layer (upperLayer). exe is the hutch
// binary ("" = /proc/self/exe); the command's output goes to out.
func SandboxRunner(st *images.Store, exe string, out io.Writer, specFile string) RunFunc {
	return func(ctx context.Context, parent *images.Image, s Step, allow []string) (string, error) {
		root, err := st.Root(parent)
		if err != nil {
			return "", err
		}
		tmp, err := os.MkdirTemp(filepath.Join(st.Dir, "tmp"), "build-run-")
		if err != nil {
			return "", err
		}
		defer removeAll(tmp)
		b := &mounts.BuildRoot{Root: root, Upper: filepath.Join(tmp, "upper"), Work: filepath.Join(tmp, "work")}
		dirs, err := mounts.BuildDirs(root)
		if err != nil {
			return "", err
		}
		for _, d := range dirs {
			fi, err := os.Stat(filepath.Join(root, d))
			if err != nil {
				return "", err
			}
			// The upper directory's mode is the merged directory's.
			for _, p := range []string{filepath.Join(b.Upper, d), filepath.Join(b.Work, d)} {
				if err := os.MkdirAll(p, 0o700); err != nil {
					return "", err
				}
			}
			if err := os.Chmod(filepath.Join(b.Upper, d), fi.Mode().Perm()|fi.Mode()&os.ModeSticky); err != nil {
				return "", err
			}
		}
		// The workspace: an empty scratch directory outside hutch's own
		// (a workspace there is refused), not captured.
		ws, err := os.MkdirTemp("", "hutch-build-workspace-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(ws)
		p, err := stepPolicy(parent, ws, allow, specFile)
		if err != nil {
			return "", err
		}
		script := s.Command
		if wd := parent.Config.Config.WorkingDir; wd != "" {
			script = "cd '" + strings.ReplaceAll(wd, "'", `'\''`) + "' || exit 1\n" + script
		}
		outF, closeOut, err := asFile(out)
		if err != nil {
			return "", err
		}
		defer closeOut()
		res, err := hutch.Run(ctx, &hutch.RunOptions{
			Policy: p, Argv: []string{"/bin/sh", "-c", script}, Executable: exe,
			Stdout: outF, Stderr: outF, Build: b,
		})
		if err != nil {
			return "", fmt.Errorf("the step's sandbox: %w", err)
		}
		if res.ExitCode != 0 {
			msg := ""
			if len(res.Messages) > 0 {
				msg = " (" + strings.Join(res.Messages, "; ") + ")"
			}
			return "", fmt.Errorf("the command exited with status %d%s", res.ExitCode, msg)
		}
		return upperLayer(filepath.Join(st.Dir, "tmp"), b.Upper)
	}
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
	p.Network.Allow = nil
	for _, a := range allow {
		host, port := a, 443
		if h, ps, ok := strings.Cut(a, ":"); ok {
			n, err := strconv.Atoi(ps)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("network.allow %q: want HOST or HOST:PORT", a)
			}
			host, port = h, n
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
