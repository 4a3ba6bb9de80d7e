package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch/imagebuild"
	"github.com/hutchsandbox/hutch/images"
	"github.com/hutchsandbox/hutch/nsjail"
)

// imageBuildCommand is hutch image build.
func imageBuildCommand(fail func(error) error) *cli.Command {
	return &cli.Command{
		Name:  "build",
		Usage: "build an image into hutch's store from a TOML spec (from, then run/copy/env/workdir steps, each cached); writes SPEC.lock (docs/IMAGES.md, Building images)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "the build spec `FILE` (TOML)"},
			&cli.StringFlag{Name: "tag", Usage: "name the built image `NAME` (a reference: local/tools:1)"},
			&cli.BoolFlag{Name: "locked", Usage: "fail (exit 3) when the build differs from FILE.lock; the lock file is not rewritten, nothing is tagged"},
			&cli.BoolFlag{Name: "no-cache", Usage: "run every step again, none taken from the step cache (what they make is still recorded there); with --locked: check that FILE.lock reproduces from scratch"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 || c.String("file") == "" {
				return &exitError{imageExitUsage, "hutch: usage: hutch image build -f FILE [--tag NAME] [--locked] [--no-cache]"}
			}
			spec, err := imagebuild.Load(c.String("file"))
			if err != nil {
				return &exitError{imageExitUsage, "hutch: image build: " + err.Error()}
			}
			st, err := images.OpenDefault()
			if err != nil {
				return fail(err)
			}
			sx := &imagebuild.Sandbox{Store: st, Out: os.Stdout, SpecFile: spec.File, Env: os.Environ(), ProbeOverlay: nsjail.ProbeOverlay}
			flatten, err := flattenHere(st)
			if err != nil {
				return &exitError{imageExitUsage, "hutch: image build: " + err.Error()}
			}
			res, err := imagebuild.Build(c.Context, st, spec, imagebuild.Options{
				Tag: c.String("tag"), Locked: c.Bool("locked"), NoCache: c.Bool("no-cache"), Flatten: flatten, Out: os.Stdout,
				Pull: func(ctx context.Context, ref string) (*images.Image, error) {
					fmt.Fprintf(os.Stderr, "hutch: image %s is not in the store: pulling it (hutch image pull)\n", ref)
					rep, err := pullImage(ctx, st, ref, true, false)
					if err != nil {
						return nil, err
					}
					return rep.Image, nil
				},
				Run: sx.Run, Versions: sx.Versions,
			})
			var le *imagebuild.LockError
			var se *imagebuild.SpecError
			switch {
			case errors.As(err, &le):
				return &exitError{imageExitLocked, "hutch: image build: " + err.Error()}
			case errors.As(err, &se):
				return &exitError{imageExitUsage, "hutch: image build: " + err.Error()}
			case err != nil:
				return fail(fmt.Errorf("image build %s: %w (nothing tagged)", spec.File, err))
			}
			for _, n := range res.Image.Names {
				fmt.Println(n)
			}
			fmt.Printf("digest: %s\n", res.Image.Digest)
			if c.Bool("locked") {
				fmt.Printf("matches %s\n", res.LockPath)
			} else {
				fmt.Printf("lock: %s\n", res.LockPath)
			}
			return nil
		},
	}
}
