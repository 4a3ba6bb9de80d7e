package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch/images"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/terminal"
)

// Exit statuses of hutch image: 0 done, 1 refused or failed (the reason
// on stderr), 2 usage (for build, also a spec that is not valid), 3 a
// build with --locked that differs from its lock file.
const (
	imageExitFailed = 1
	imageExitUsage  = 2
	imageExitLocked = 3
)

func imageCommand() *cli.Command {
	fail := func(err error) error { return &exitError{imageExitFailed, "hutch: " + err.Error()} }
	usage := func(u string) error { return &exitError{imageExitUsage, "hutch: usage: hutch image " + u} }
	// withStore is an action on the default store, args the number of
	// arguments it takes (-1: one or more) and u its usage.
	withStore := func(args int, u string, f func(c *cli.Context, st *images.Store) error) cli.ActionFunc {
		return func(c *cli.Context) error {
			if (args >= 0 && c.NArg() != args) || (args < 0 && c.NArg() == 0) {
				return usage(u)
			}
			st, err := images.OpenDefault()
			if err != nil {
				return fail(err)
			}
			return f(c, st)
		}
	}
	return &cli.Command{
		Name:  "image",
		Usage: "pull, import, list, inspect and remove the images sandboxes use as their root (--image, tooling = \"image:REF\"; docs/IMAGES.md)",
		Subcommands: []*cli.Command{
			{
				Name:      "pull",
				Usage:     "fetch an image from its registry into hutch's store (every blob verified against its digest; layers already stored are not fetched)",
				ArgsUsage: "REF (REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:HEX)",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "no-unpack", Usage: "store the verified blobs only; the layers are unpacked when a sandbox first uses the image"}},
				Action: withStore(1, "pull [--no-unpack] REF", func(c *cli.Context, st *images.Store) error {
					rep, err := pullImage(c.Context, st, c.Args().First(), false, c.Bool("no-unpack"))
					if err != nil {
						return fail(err)
					}
					printReport(rep, c.Bool("no-unpack"))
					return nil
				}),
			},
			{
				Name:      "import",
				Usage:     "store the image of a docker-archive tarball (docker save) or an OCI image layout directory",
				ArgsUsage: "FILE|DIR",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "tag", Usage: "name the image `REF` (default: the names the archive gives)"}},
				Action: withStore(1, "import [--tag REF] FILE|DIR", func(c *cli.Context, st *images.Store) error {
					flatten, err := flattenHere(st)
					if err != nil {
						return fail(err)
					}
					pr, stop := progress()
					rep, err := st.Import(c.Context, c.Args().First(), images.ImportOptions{Tag: c.String("tag"), Progress: pr, Flatten: flatten})
					stop()
					if err != nil {
						return fail(err)
					}
					printReport(rep, false)
					return nil
				}),
			},
			imageBuildCommand(fail),
			{
				Name:  "ls",
				Usage: "list the stored images' names",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the names as a JSON array"}},
				Action: withStore(0, "ls [--json]", func(c *cli.Context, st *images.Store) error {
					es, err := st.List()
					if err != nil {
						return fail(err)
					}
					if c.Bool("json") {
						if es == nil {
							es = []images.Entry{}
						}
						b, _ := json.MarshalIndent(es, "", "  ")
						fmt.Println(string(b))
						return nil
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "NAME\tDIGEST\tADDED")
					for _, e := range es {
						fmt.Fprintf(w, "%s\t%s\t%s\n", e.Name, shortDigest(e.Digest), e.Added.Local().Format(time.DateTime))
					}
					return w.Flush()
				}),
			},
			{
				Name:      "inspect",
				Usage:     "print a stored image as JSON: names, digest, config (env, working directory, user, command), layers, what the unpack skipped, its root",
				ArgsUsage: "REF",
				Action: withStore(1, "inspect REF", func(c *cli.Context, st *images.Store) error {
					img, err := st.Lookup(c.Args().First())
					if err != nil {
						return fail(err)
					}
					b, err := json.MarshalIndent(inspect(st, img), "", "  ")
					if err != nil {
						return fail(err)
					}
					fmt.Println(string(b))
					return nil
				}),
			},
			{
				Name:      "rm",
				Usage:     "remove names (every name of the image, given its digest) and what no other image uses",
				ArgsUsage: "REF...",
				Action: withStore(-1, "rm REF...", func(c *cli.Context, st *images.Store) error {
					for _, ref := range c.Args().Slice() {
						rm, err := st.Remove(ref)
						if err != nil {
							return fail(err)
						}
						for _, n := range rm.Names {
							fmt.Printf("untagged %s\n", n)
						}
						printRemoved(rm)
					}
					return nil
				}),
			},
			{
				Name:  "prune",
				Usage: "remove what no name uses: images replaced by a newer pull, their layers, interrupted pulls",
				Action: withStore(0, "prune", func(c *cli.Context, st *images.Store) error {
					rm, err := st.Prune()
					if err != nil {
						return fail(err)
					}
					printRemoved(rm)
					return nil
				}),
			},
		},
	}
}

// imageFlag is --image of run, session start, plan and mcp.
var imageFlag = &cli.StringFlag{Name: "image", Usage: "use the image `REF` of hutch's store as the read-only root (tooling = \"image:REF\"; run and session start pull it when missing; docs/IMAGES.md)"}

// imageTooling applies --image to p's tooling (--tooling and --image
// together are refused).
func imageTooling(c *cli.Context, p *policy.Policy) error {
	v := c.String("image")
	if v == "" {
		return nil
	}
	if c.IsSet("tooling") {
		return errors.New("--image and --tooling both set the read-only root: give one (--image REF is --tooling image:REF)")
	}
	p.Filesystem.Tooling = policy.ToolingImage + v
	return nil
}

// ensureImage pulls the image of p's tooling when the store lacks it, as
// docker run and podman run do, saying so on stderr.
func ensureImage(ctx context.Context, p *policy.Policy) error {
	ref, ok := p.Filesystem.ImageRef()
	if !ok {
		return nil
	}
	_, _, err := images.LookupDefault(ref)
	var nf *images.NotFoundError
	if !errors.As(err, &nf) {
		return err
	}
	st, err := images.OpenDefault()
	if err != nil {
		return fmt.Errorf("filesystem.tooling %q: %w", p.Filesystem.Tooling, err)
	}
	if strings.HasPrefix(ref, "sha256:") {
		return err // a bare digest names no registry
	}
	fmt.Fprintf(os.Stderr, "hutch: image %s is not in the store: pulling it (hutch image pull)\n", ref)
	if _, err := pullImage(ctx, st, ref, true, false); err != nil {
		return fmt.Errorf("filesystem.tooling %q: %w", p.Filesystem.Tooling, err)
	}
	return nil
}

// pullImage pulls ref with progress on a terminal.
func pullImage(ctx context.Context, st *images.Store, ref string, quiet, noUnpack bool) (*images.Report, error) {
	var flatten bool
	if !noUnpack { // (blobs alone need no root: no probe)
		var err error
		if flatten, err = flattenHere(st); err != nil {
			return nil, err
		}
	}
	pr, stop := progress()
	defer stop()
	rep, err := st.Pull(ctx, ref, images.PullOptions{Progress: pr, NoUnpack: noUnpack, Flatten: flatten})
	if err == nil && quiet && len(rep.Skipped) > 0 {
		fmt.Fprintf(os.Stderr, "hutch: image %s: %d entries not unpacked (hutch image inspect lists them)\n", ref, len(rep.Skipped))
	}
	return rep, err
}

// flattenHere says whether an image stored in st needs its flattened
// copy built when it is stored: where its root cannot be overlays of its
// layers (plan.ImageRootForm), so that the first sandbox on it does not
// build the copy.
func flattenHere(st *images.Store) (bool, error) {
	overlay, _, err := plan.ImageRootForm(st, os.Environ(), nsjail.ProbeOverlay)
	return !overlay, err
}

// progress reports layer downloads on stderr when it is a terminal: one
// line, rewritten every 200 ms; nothing otherwise.
func progress() (images.Progress, func()) {
	if !terminal.IsTerminal(os.Stderr) {
		return nil, func() {}
	}
	var mu sync.Mutex
	type st struct{ done, total int64 }
	layers := map[v1.Hash]st{}
	stop := make(chan struct{})
	finished := make(chan struct{})
	line := func() {
		mu.Lock()
		var done, total int64
		for _, s := range layers {
			done, total = done+s.done, total+s.total
		}
		n := len(layers)
		mu.Unlock()
		if n > 0 {
			s := "s"
			if n == 1 {
				s = ""
			}
			fmt.Fprintf(os.Stderr, "\r\033[Khutch: fetching %d layer%s: %s of %s", n, s, mib(done), mib(total))
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				line()
			case <-stop:
				line()
				mu.Lock()
				if len(layers) > 0 {
					fmt.Fprintln(os.Stderr)
				}
				mu.Unlock()
				return
			}
		}
	}()
	var once sync.Once
	return func(l v1.Hash, done, total int64) {
			mu.Lock()
			layers[l] = st{done, total}
			mu.Unlock()
		}, func() {
			once.Do(func() { close(stop); <-finished })
		}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

func printReport(rep *images.Report, noUnpack bool) {
	img := rep.Image
	for _, n := range img.Names {
		fmt.Printf("%s\n", n)
	}
	fmt.Printf("digest: %s\n", img.Digest)
	fmt.Printf("layers: %d fetched (%s), %d already stored\n", len(rep.Fetched), mib(rep.Bytes), len(rep.Present))
	if noUnpack {
		fmt.Println("not unpacked yet: the first sandbox on the image unpacks it")
	}
	for _, s := range rep.Skipped {
		fmt.Printf("not unpacked: %s\n", s)
	}
}

func printRemoved(rm *images.Removed) {
	for _, d := range rm.Images {
		fmt.Printf("deleted image %s\n", d)
	}
	fmt.Printf("deleted %d layers, %d blobs, %s\n", len(rm.Layers), len(rm.Blobs), mib(rm.Bytes))
}

// imagesStatus is hutch doctor's line on the image store and on what an
// image's root is here (plan.ImageRootForm: the probe's verdict, cached
// once per boot in the store).
func imagesStatus() string {
	d := images.DefaultDir()
	if d == "" {
		return "no image store: " + images.ErrNoStore.Error()
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		return "no image store yet (" + d + " is made by the first hutch image pull, import or build; whether an image's root can be overlays of its layers is probed then)"
	}
	s, err := images.Open(d)
	if err != nil {
		return "image store: " + err.Error()
	}
	es, _ := s.List()
	names := "names"
	if len(es) == 1 {
		names = "name"
	}
	head := fmt.Sprintf("store %s (%d %s); ", d, len(es), names)
	overlay, why, err := plan.ImageRootForm(s, os.Environ(), nsjail.ProbeOverlay)
	switch {
	case err != nil:
		return head + err.Error()
	case overlay:
		return head + "an image's root is read-only overlays of its layers (overlayfs mounts in a sandbox's user namespace here with the store's file system as its lower layers; a directory one layer makes is bound from that layer; " + plan.ImageRootEnv + "=flattened uses a flattened copy instead)"
	}
	return head + "an image's root is a flattened copy of its layers (a tree of hard links, built when it is stored), bound read-only, not overlays of its layers: " + why
}

// inspected is hutch image inspect's object.
type inspected struct {
	Names        []string         `json:"names"`
	Digest       string           `json:"digest"`
	Created      time.Time        `json:"created"`
	OS           string           `json:"os"`
	Architecture string           `json:"architecture"`
	Env          []string         `json:"env"`
	WorkingDir   string           `json:"working_dir,omitempty"`
	User         string           `json:"user,omitempty"`
	Entrypoint   []string         `json:"entrypoint,omitempty"`
	Cmd          []string         `json:"cmd,omitempty"`
	Layers       []inspectedLayer `json:"layers"`
	// Root is the flattened copy of its layers, when one was built
	// (where its root cannot be overlays of its layers).
	Root string `json:"root,omitempty"`
}

type inspectedLayer struct {
	Digest    string   `json:"digest"`
	DiffID    string   `json:"diff_id"`
	Size      int64    `json:"size"`
	MediaType string   `json:"media_type"`
	Whiteouts []string `json:"whiteouts,omitempty"`
	Opaque    []string `json:"opaque,omitempty"`
	Skipped   []string `json:"not_unpacked,omitempty"`
	// NotOverlay says why the layer's tree lacks overlayfs's markers
	// (images.LayerMeta.OverlayWhy): images using it get a flattened root.
	NotOverlay string `json:"not_overlay,omitempty"`
}

func inspect(st *images.Store, img *images.Image) inspected {
	c := img.Config
	in := inspected{Names: img.Names, Digest: img.Digest.String(), Created: c.Created.Time, OS: c.OS, Architecture: c.Architecture,
		Env: c.Config.Env, WorkingDir: c.Config.WorkingDir, User: c.Config.User, Entrypoint: c.Config.Entrypoint, Cmd: c.Config.Cmd}
	if root, ok := st.BuiltRoot(img); ok {
		in.Root = root // "" when none was built (its root is its layers, or it is not unpacked yet)
	}
	for _, l := range img.Layers {
		il := inspectedLayer{Digest: l.Digest.String(), DiffID: l.DiffID.String(), Size: l.Size, MediaType: l.MediaType}
		if m, err := st.Meta(l); err == nil {
			il.Whiteouts, il.Opaque, il.Skipped, il.NotOverlay = m.Whiteouts, m.Opaque, m.Skipped, m.OverlayWhy
		}
		in.Layers = append(in.Layers, il)
	}
	return in
}
