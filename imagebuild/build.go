package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hutchsandbox/hutch/images"
)

// RunFunc runs a run step's command on the root of parent and returns the
// path of a layer tar of what it wrote (the caller removes it). nil: a
// spec with a run step is refused.
type RunFunc func(ctx context.Context, parent *images.Image, step Step, allow []string) (tarPath string, err error)

// Options control a build.
type Options struct {
	// Tag names the built image (a reference as images.ParseRef reads
	// it); empty: known by its digest only.
	Tag string
	// Locked fails the build (a *LockError) when what it builds differs
	// from the lock file; the lock file is not rewritten and nothing is
	// tagged.
	Locked bool
	// NoCache runs every step again, none taken from the step cache (as
	// docker build --no-cache); what the steps make is still recorded
	// there, replacing what was, so that a later build without NoCache
	// reuses it. With Locked, the rebuild from scratch is what is compared
	// with the lock file: a check that the lock file reproduces.
	NoCache bool
	// Flatten builds the built image's flattened copy when it is stored
	// (images.AddOptions.Flatten): for where an image's root cannot be
	// overlays of its layers. Without it the copy is built by the first
	// sandbox that needs one.
	Flatten bool
	// Out receives a line per step (nil: nothing).
	Out io.Writer
	// Pull fetches a base the store lacks (nil: a missing base fails).
	Pull func(ctx context.Context, ref string) (*images.Image, error)
	// Run runs run steps.
	Run RunFunc
	// Versions, when set, finds the versions installed in the built
	// image (Lock.Installed).
	Versions func(ctx context.Context, img *images.Image) (map[string][]string, error)
}

// Result is a finished build.
type Result struct {
	// Image is the built image, stored (and tagged when Options.Tag).
	Image *images.Image
	// Lock is what was written (or, with Locked, matched) to LockPath.
	Lock     *Lock
	LockPath string
	// Cached says, per step, whether it came from the cache.
	Cached []bool
}

// LockPath is the lock file beside a spec: SPEC.lock.
func LockPath(spec string) string { return spec + ".lock" }

// Build builds spec into st.
func Build(ctx context.Context, st *images.Store, spec *Spec, o Options) (*Result, error) {
	say := func(f string, a ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, f+"\n", a...)
		}
	}
	var names []string
	if o.Tag != "" {
		r, err := images.ParseRef(o.Tag)
		if err != nil {
			return nil, fmt.Errorf("--tag: %w", err)
		}
		names = []string{r.Name()}
	}
	for i, s := range spec.Steps {
		if s.Kind == Run && o.Run == nil {
			return nil, &SpecError{File: spec.File, Key: fmt.Sprintf("step[%d].run", i+1), Msg: "run steps need a sandbox to run in (Options.Run: imagebuild.Sandbox.Run), which this caller gives none"}
		}
	}
	lock := &Lock{Spec: filepath.Base(spec.File), From: spec.From}
	var old *Lock
	if o.Locked {
		var err error
		if old, err = ReadLock(LockPath(spec.File)); err != nil {
			return nil, err
		}
		if spec.From != "" && !strings.Contains(spec.From, "@sha256:") {
			return nil, &SpecError{File: spec.File, Key: "from", Msg: fmt.Sprintf("%q is not pinned: --locked needs from = \"REPOSITORY@sha256:HEX\" (the lock has %s)", spec.From, old.Base)}
		}
	}

	cur, err := resolveBase(ctx, st, spec, o, lock)
	if err != nil {
		return nil, err
	}
	say("from %s: %s", lock.From, cur.Digest)
	lock.Base = cur.Digest.String()
	res := &Result{LockPath: LockPath(spec.File)}

	for i, s := range spec.Steps {
		n := fmt.Sprintf("step %d/%d", i+1, len(spec.Steps))
		var tarPath string
		inputs := ""
		if s.Kind == Copy {
			p, err := writeLayerTar(filepath.Join(st.Dir, "tmp"), filepath.Join(spec.Context, filepath.FromSlash(s.Src)), s.Dest)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", n, s.Short(), err)
			}
			defer os.Remove(p)
			tarPath = p
			h, err := fileHash(p)
			if err != nil {
				return nil, err
			}
			inputs = h
		}
		if s.Kind == Run {
			inputs = "allow " + strings.Join(spec.Allow, ",")
		}
		key := cacheKey(cur.Digest.String(), s, inputs)
		why := noCacheReason(o, s)
		if why == "" {
			if img, err := cached(st, key); err != nil {
				return nil, err
			} else if img != nil {
				say("%s: cached: %s", n, s.Short())
				cur = img
				res.Cached = append(res.Cached, true)
				lock.Steps = append(lock.Steps, lockStep(s, key, img))
				continue
			}
			say("%s: %s", n, s.Short())
		} else {
			say("%s: not from the cache (%s): %s", n, why, s.Short())
		}
		if s.Kind == Run {
			p, err := o.Run(ctx, cur, s, spec.Allow)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", n, s.Short(), err)
			}
			defer os.Remove(p)
			tarPath = p
		}
		next, err := applyStep(ctx, st, cur, s, tarPath)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", n, s.Short(), err)
		}
		if err := cachePut(st, key, next.Digest.String()); err != nil {
			return nil, err
		}
		cur = next
		res.Cached = append(res.Cached, false)
		lock.Steps = append(lock.Steps, lockStep(s, key, next))
	}
	lock.Image = cur.Digest.String()
	if o.Versions != nil {
		vs, err := o.Versions(ctx, cur)
		if err != nil {
			return nil, err
		}
		if len(vs) > 0 {
			lock.Installed = vs
		}
	}
	if o.Locked {
		if diffs := old.diff(lock); len(diffs) > 0 {
			return nil, &LockError{Path: res.LockPath, Diffs: diffs}
		}
	}
	// The lock file before the name: a build whose lock cannot be
	// written tags nothing.
	if !o.Locked {
		if err := lock.Write(res.LockPath); err != nil {
			return nil, err
		}
	}
	// The final image: unpacked (its flattened copy built with
	// o.Flatten), named.
	v, err := st.V1Image(cur)
	if err != nil {
		return nil, err
	}
	rep, err := st.Add(ctx, v, images.AddOptions{Names: names, Flatten: o.Flatten})
	if err != nil {
		return nil, fmt.Errorf("store the built image: %w", err)
	}
	res.Image = rep.Image
	res.Lock = lock
	return res, nil
}

// resolveBase is the spec's base image: a rootfs directory stored as a
// one-layer image, or an image of the store (pulled by o.Pull when
// missing); lock.From says which.
func resolveBase(ctx context.Context, st *images.Store, spec *Spec, o Options, lock *Lock) (*images.Image, error) {
	if spec.RootFS != "" {
		lock.From = "rootfs:" + spec.RootFS
		img, err := rootfsBase(ctx, st, spec.RootFS)
		if err != nil {
			return nil, fmt.Errorf("from rootfs:%s: %w", spec.RootFS, err)
		}
		return img, nil
	}
	img, err := st.Lookup(spec.From)
	var nf *images.NotFoundError
	if errors.As(err, &nf) && o.Pull != nil {
		img, err = o.Pull(ctx, spec.From)
	}
	if err != nil {
		return nil, fmt.Errorf("from %s: %w", spec.From, err)
	}
	return img, nil
}

// noCacheReason is why step s is not looked up in the step cache, as the
// build's output names it: "--no-cache" (o.NoCache), "cache = false" (the
// step's own), or "" (it is looked up).
func noCacheReason(o Options, s Step) string {
	switch {
	case o.NoCache:
		return "--no-cache"
	case s.NoCache:
		return "cache = false"
	}
	return ""
}

// cached is the image the cache has for key, if the store still has it
// whole (nil: a miss).
func cached(st *images.Store, key string) (*images.Image, error) {
	d, err := cacheGet(st, key)
	if err != nil || d == "" {
		return nil, err
	}
	h, err := v1.NewHash(d)
	if err != nil {
		return nil, nil
	}
	img, err := st.Get(h)
	if err != nil {
		return nil, nil // pruned
	}
	if _, err := st.V1Image(img); err != nil {
		return nil, nil // a blob pruned
	}
	return img, nil
}

// cacheKey is sha256 over the parent image's manifest digest, the step's
// kind and text, and its inputs (a copy's layer tar digest; a run's
// network allowlist).
func cacheKey(parent string, s Step, inputs string) string {
	h := sha256.New()
	fmt.Fprintf(h, "hutch image build step v1\nparent %s\nkind %s\nstep %q\ninputs %s\n", parent, s.Kind, s.Text(), inputs)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func fileHash(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// layerFrom is a gzip layer of the tar at p.
func layerFrom(p string) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(p) }, tarball.WithMediaType(types.OCILayer))
}

// applyStep makes the image of step s on parent (tarPath: the layer of a
// copy or run step) and stores it without a name, blobs only (the final
// image is unpacked; Store.Root unpacks an intermediate one a run step
// needs).
func applyStep(ctx context.Context, st *images.Store, parent *images.Image, s Step, tarPath string) (*images.Image, error) {
	base, err := st.V1Image(parent)
	if err != nil {
		return nil, err
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	hist := v1.History{CreatedBy: "hutch image build: " + s.Text()}
	if s.Kind == Run {
		// What the layer cannot carry, where an image's readers look.
		hist.Comment = "rootless build step: every file is owned by 0:0; chown to other ids had no effect"
	}
	var img v1.Image
	switch s.Kind {
	case Env:
		for _, kv := range s.Env {
			cfg.Config.Env = setEnv(cfg.Config.Env, kv[0], kv[1])
		}
	case Workdir:
		cfg.Config.WorkingDir = s.Dir
	}
	switch s.Kind {
	case Env, Workdir:
		hist.EmptyLayer = true
		cfg.History = append(cfg.History, hist)
		if img, err = mutate.ConfigFile(base, cfg); err != nil {
			return nil, err
		}
	default:
		l, err := layerFrom(tarPath)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.ConfigFile(base, cfg); err != nil {
			return nil, err
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: hist}); err != nil {
			return nil, err
		}
	}
	rep, err := st.Add(ctx, img, images.AddOptions{NoUnpack: true})
	if err != nil {
		return nil, err
	}
	return rep.Image, nil
}

// setEnv sets k=v in env (KEY=VALUE entries), replacing an earlier k.
func setEnv(env []string, k, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, k+"=") {
			out = append(out, e)
		}
	}
	return append(out, k+"="+v)
}

// rootfsBase stores the tree of dir as a one-layer image.
func rootfsBase(ctx context.Context, st *images.Store, dir string) (*images.Image, error) {
	p, err := writeLayerTar(filepath.Join(st.Dir, "tmp"), dir, "")
	if err != nil {
		return nil, err
	}
	defer os.Remove(p)
	l, err := layerFrom(p)
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", goArch()
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if base, err = mutate.ConfigFile(base, cfg); err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: "hutch image build: from rootfs"}})
	if err != nil {
		return nil, err
	}
	rep, err := st.Add(ctx, img, images.AddOptions{NoUnpack: true})
	if err != nil {
		return nil, err
	}
	return rep.Image, nil
}
