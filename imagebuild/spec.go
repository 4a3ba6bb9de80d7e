// Package imagebuild builds images into hutch's image store from a small
// TOML spec (hutch image build): a base (an image or a rootfs directory),
// then steps, each cached by its parent and inputs, with a lock file beside
// the spec recording what was built. docs/IMAGES.md (Building images).
package imagebuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Spec is a parsed, validated build spec.
type Spec struct {
	// File is the spec's path; Context the directory copy sources are
	// relative to (the spec's own directory unless the spec says).
	File, Context string
	// From is the base: an image reference, or RootFS for "rootfs:DIR".
	From   string
	RootFS string
	// Allow is the network allowlist of run steps (host or host:port).
	Allow []string
	// Steps, in order.
	Steps []Step
}

// Step kinds.
const (
	Run     = "run"
	Copy    = "copy"
	Env     = "env"
	Workdir = "workdir"
)

// Step is one step of a build: exactly one kind.
type Step struct {
	// Kind is Run, Copy, Env or Workdir.
	Kind string
	// Run: the shell command (sh -c).
	Command string
	// NoCache (a run step's cache = false) runs the step in every build,
	// never taken from the step cache; what it makes is still recorded
	// there. It is not part of the step's text or cache key.
	NoCache bool
	// Copy: Src relative to the context (a file or directory), Dest an
	// absolute path in the image.
	Src, Dest string
	// Env: the variables set, in key order.
	Env [][2]string
	// Workdir: an absolute path.
	Dir string
}

// Text is the step as the cache key and the build's output name it.
func (s Step) Text() string {
	switch s.Kind {
	case Run:
		return "run " + s.Command
	case Copy:
		return "copy " + s.Src + " " + s.Dest
	case Env:
		var b strings.Builder
		b.WriteString("env")
		for _, kv := range s.Env {
			fmt.Fprintf(&b, " %s=%q", kv[0], kv[1])
		}
		return b.String()
	default:
		return "workdir " + s.Dir
	}
}

// Short is Text on one line, for messages: a multi-line command's first
// line and how many more.
func (s Step) Short() string {
	t := strings.TrimSpace(s.Text())
	first, rest, ok := strings.Cut(t, "\n")
	if !ok {
		return t
	}
	return fmt.Sprintf("%s ... (%d more lines)", first, strings.Count(rest, "\n")+1)
}

// The document as TOML gives it; every field optional so that a missing
// one is reported by name.
type rawSpec struct {
	From    *string   `toml:"from"`
	Context *string   `toml:"context"`
	Network *rawNet   `toml:"network"`
	Step    []rawStep `toml:"step"`
}

type rawNet struct {
	Allow []string `toml:"allow"`
}

type rawStep struct {
	Run     *string           `toml:"run"`
	Cache   *bool             `toml:"cache"`
	Copy    *string           `toml:"copy"`
	To      *string           `toml:"to"`
	Env     map[string]string `toml:"env"`
	Workdir *string           `toml:"workdir"`
}

// SpecError is a spec that cannot be built: File, the Key at fault (e.g.
// "step[2].copy") and what would be valid.
type SpecError struct {
	File, Key, Msg string
}

func (e *SpecError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Key, e.Msg)
}

const validKeys = "valid: from, context, [network] allow, [[step]] with one of run (and cache), copy (and to), env, workdir"

// Load reads and validates the spec in file.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the spec: %w", err)
	}
	return Parse(data, file)
}

// Parse validates a spec's text; file names it in errors and is where the
// context is relative to. Every problem found is returned (joined).
func Parse(data []byte, file string) (*Spec, error) {
	var raw rawSpec
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			var errs []error
			for _, de := range sm.Errors {
				line, _ := de.Position()
				errs = append(errs, &SpecError{File: file, Key: strings.Join(de.Key(), "."),
					Msg: fmt.Sprintf("unknown key (line %d; %s)", line, validKeys)})
			}
			return nil, errors.Join(errs...)
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			return nil, &SpecError{File: file, Key: strings.Join(de.Key(), "."), Msg: fmt.Sprintf("line %d column %d: %s", line, col, strings.TrimPrefix(de.Error(), "toml: "))}
		}
		return nil, &SpecError{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	}
	dir := filepath.Dir(file)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	s := &Spec{File: file, Context: dir}
	var errs []error
	bad := func(key, f string, a ...any) {
		errs = append(errs, &SpecError{File: file, Key: key, Msg: fmt.Sprintf(f, a...)})
	}
	switch {
	case raw.From == nil || *raw.From == "":
		bad("from", "missing: the base, an image reference (REGISTRY/REPOSITORY@sha256:HEX, or a tag) or rootfs:DIR")
	case strings.HasPrefix(*raw.From, "rootfs:"):
		d := strings.TrimPrefix(*raw.From, "rootfs:")
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			bad("from", "rootfs:%s is not a directory", strings.TrimPrefix(*raw.From, "rootfs:"))
		}
		s.RootFS = d
	default:
		s.From = *raw.From
	}
	if raw.Context != nil {
		c := *raw.Context
		if !filepath.IsAbs(c) {
			c = filepath.Join(dir, c)
		}
		if fi, err := os.Stat(c); err != nil || !fi.IsDir() {
			bad("context", "%q is not a directory", *raw.Context)
		}
		s.Context = filepath.Clean(c)
	}
	if raw.Network != nil {
		for i, a := range raw.Network.Allow {
			if _, _, err := hostPort(a); err != nil {
				bad(fmt.Sprintf("network.allow[%d]", i), "%v", err)
			}
		}
		s.Allow = raw.Network.Allow
	}
	if len(raw.Step) == 0 {
		bad("step", "no steps: add [[step]] tables, each with one of run, copy, env, workdir")
	}
	for i, rs := range raw.Step {
		key := fmt.Sprintf("step[%d]", i+1)
		var kinds []string
		st := Step{}
		if rs.Run != nil {
			kinds = append(kinds, Run)
			st.Kind, st.Command = Run, *rs.Run
			if strings.TrimSpace(*rs.Run) == "" {
				bad(key+".run", "empty command")
			}
		}
		if rs.Cache != nil {
			if rs.Run == nil {
				bad(key+".cache", "cache belongs to a run step (a copy step's key has its files' hashes; env and workdir run nothing)")
			} else {
				st.NoCache = !*rs.Cache
			}
		}
		if rs.Copy != nil {
			kinds = append(kinds, Copy)
			st.Kind = Copy
			src := path.Clean(filepath.ToSlash(*rs.Copy))
			if *rs.Copy == "" || path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../") {
				bad(key+".copy", "%q: want a path inside the build context %s (relative, no ..)", *rs.Copy, s.Context)
			} else if err := inContext(s.Context, src); err != nil {
				bad(key+".copy", "%q: %v", *rs.Copy, err)
			}
			st.Src = src
			if rs.To == nil || !path.IsAbs(*rs.To) {
				bad(key+".to", "copy needs to = \"/ABSOLUTE/PATH\" in the image")
			} else {
				st.Dest = path.Clean(*rs.To)
			}
		} else if rs.To != nil {
			bad(key+".to", "to belongs to a copy step")
		}
		if rs.Env != nil {
			kinds = append(kinds, Env)
			st.Kind = Env
			if len(rs.Env) == 0 {
				bad(key+".env", "empty: want env = { NAME = \"VALUE\" }")
			}
			for k, v := range rs.Env {
				if k == "" || strings.ContainsAny(k, "= \t\n") {
					bad(key+".env", "variable name %q: no =, spaces or newlines", k)
				}
				st.Env = append(st.Env, [2]string{k, v})
			}
			sort.Slice(st.Env, func(a, b int) bool { return st.Env[a][0] < st.Env[b][0] })
		}
		if rs.Workdir != nil {
			kinds = append(kinds, Workdir)
			st.Kind, st.Dir = Workdir, path.Clean(*rs.Workdir)
			if !path.IsAbs(*rs.Workdir) {
				bad(key+".workdir", "%q: want an absolute path", *rs.Workdir)
			}
		}
		switch len(kinds) {
		case 0:
			bad(key, "no step kind: want one of run, copy, env, workdir")
		case 1:
		default:
			bad(key, "more than one kind (%s): a step is exactly one of run, copy, env, workdir", strings.Join(kinds, ", "))
		}
		s.Steps = append(s.Steps, st)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// inContext checks that rel names an entry of the context directory ctx
// reached without following a symlink out of it (the entry itself may be
// a symlink: it is copied as one).
func inContext(ctx, rel string) error {
	p := filepath.Join(ctx, filepath.FromSlash(rel))
	if _, err := os.Lstat(p); err != nil {
		return fmt.Errorf("not in the build context %s", ctx)
	}
	realCtx, err := filepath.EvalSymlinks(ctx)
	if err != nil {
		return err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	if parent != realCtx && !strings.HasPrefix(parent, realCtx+string(filepath.Separator)) {
		return fmt.Errorf("outside the build context %s (through a symlink): copy only what is inside it", ctx)
	}
	return nil
}

// hostPort splits an allow entry: HOST (port 443) or HOST:PORT.
func hostPort(a string) (string, int, error) {
	host, port := a, 443
	if h, ps, ok := strings.Cut(a, ":"); ok {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("%q: want HOST or HOST:PORT (a port 1-65535)", a)
		}
		host, port = h, n
	}
	if host == "" || strings.ContainsAny(host, "/ *:") {
		return "", 0, fmt.Errorf("%q: want HOST or HOST:PORT", a)
	}
	return host, port, nil
}
