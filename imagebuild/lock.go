package imagebuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/hutchsandbox/hutch/images"
)

// Lock is the lock file beside a spec (SPEC.lock, JSON): what a build
// made, for --locked to compare a rebuild with.
type Lock struct {
	// Spec is the spec's file name.
	Spec string `json:"spec"`
	// From is the spec's from; Base the manifest digest it resolved to.
	From string `json:"from"`
	Base string `json:"base"`
	// Steps, in order.
	Steps []LockStep `json:"steps"`
	// Image is the built image's manifest digest.
	Image string `json:"image"`
	// Installed are the versions found in the built image by run steps'
	// tooling: "dpkg" (PACKAGE=VERSION lines), "go", "node", "python3".
	Installed map[string][]string `json:"installed,omitempty"`
}

// LockStep is one step in a Lock.
type LockStep struct {
	Step string `json:"step"`
	Key  string `json:"key"`
	// Layer is the diff id of the layer the step added ("" for env and
	// workdir, which change the config only); Image the manifest digest
	// after the step.
	Layer string `json:"layer,omitempty"`
	Image string `json:"image"`
}

func lockStep(s Step, key string, img *images.Image) LockStep {
	ls := LockStep{Step: s.Text(), Key: key, Image: img.Digest.String()}
	if s.Kind == Copy || s.Kind == Run {
		ls.Layer = img.Layers[len(img.Layers)-1].DiffID.String()
	}
	return ls
}

// ReadLock reads a lock file.
func ReadLock(path string) (*Lock, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--locked: there is no lock file %s (build once without --locked to write it)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	var l Lock
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	return &l, nil
}

// Write replaces the lock file at path atomically, through a temporary
// file beside it (the rename stays on one file system).
func (l *Lock) Write(path string) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, filepath.Dir(path), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("lock file %s: %w", path, err)
	}
	return nil
}

// diff lists how got differs from l, one line each.
func (l *Lock) diff(got *Lock) []string {
	var d []string
	if l.Base != got.Base {
		d = append(d, fmt.Sprintf("base: the lock has %s, the build resolved %s to %s", l.Base, got.From, got.Base))
	}
	for i := 0; i < max(len(l.Steps), len(got.Steps)); i++ {
		switch {
		case i >= len(l.Steps):
			d = append(d, fmt.Sprintf("step %d (%s): not in the lock", i+1, got.Steps[i].Step))
		case i >= len(got.Steps):
			d = append(d, fmt.Sprintf("step %d (%s): in the lock, not in the spec", i+1, l.Steps[i].Step))
		case l.Steps[i].Step != got.Steps[i].Step:
			d = append(d, fmt.Sprintf("step %d: the lock has %q, the spec %q", i+1, l.Steps[i].Step, got.Steps[i].Step))
		case l.Steps[i].Layer != got.Steps[i].Layer:
			d = append(d, fmt.Sprintf("step %d (%s): layer %s, the lock has %s", i+1, got.Steps[i].Step, got.Steps[i].Layer, l.Steps[i].Layer))
		case l.Steps[i].Key != got.Steps[i].Key:
			d = append(d, fmt.Sprintf("step %d (%s): its inputs or parent changed (cache key %s, the lock has %s)", i+1, got.Steps[i].Step, got.Steps[i].Key, l.Steps[i].Key))
		}
	}
	if len(d) == 0 && l.Image != got.Image {
		d = append(d, fmt.Sprintf("image: %s, the lock has %s", got.Image, l.Image))
	}
	for _, k := range []string{"dpkg", "go", "node", "python3"} {
		if a, b := strings.Join(l.Installed[k], "\n"), strings.Join(got.Installed[k], "\n"); a != b {
			d = append(d, fmt.Sprintf("installed %s: the lock has %q, the build %q", k, a, b))
		}
	}
	return d
}

// LockError is a --locked build that differs from its lock file.
type LockError struct {
	Path  string
	Diffs []string
}

func (e *LockError) Error() string {
	return fmt.Sprintf("--locked: the build differs from %s (nothing tagged, the lock file unchanged):\n  %s", e.Path, strings.Join(e.Diffs, "\n  "))
}

func goArch() string { return runtime.GOARCH }
