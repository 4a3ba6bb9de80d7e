package test

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// An image's directories that layers share are, by default, read-only
// overlays of them (mountinfo says overlay at /opt), showing exactly the
// merged view: a whiteout deletes, an opaque directory hides the lower
// one's content, an upper file replaces a lower one, and a lower layer's
// program runs. Neither the pull nor the run builds a flattened copy of
// the image. HUTCH_IMAGE_ROOT=flattened shows the same tree from a
// flattened copy (built by that run), bound, not an overlay.
func TestImageOverlay(t *testing.T) {
	reg := tr.Start(t)
	img := tr.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, tr.Busybox(t),
		tr.Layer(t,
			tr.Entry{Name: "opt/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/gone", Body: "lower\n"},
			tr.Entry{Name: "opt/opq/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/opq/hidden", Body: "lower\n"},
			tr.Entry{Name: "opt/f", Body: "lower\n"},
			tr.Entry{Name: "opt/keep", Body: "keep\n"},
			tr.Entry{Name: "opt/run", Body: "#!/bin/sh\necho ran\n", Mode: 0o755},
			tr.Entry{Name: "etc/", Type: tar.TypeDir},
			tr.Entry{Name: "etc/lower.conf", Body: "lower\n"},
			tr.Entry{Name: "etc/gone.conf", Body: "lower\n"},
		),
		tr.Layer(t,
			tr.Entry{Name: "opt/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/.wh.gone"},
			tr.Entry{Name: "opt/opq/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/opq/.wh..wh..opq"},
			tr.Entry{Name: "opt/opq/new", Body: "upper\n"},
			tr.Entry{Name: "opt/f", Body: "upper\n"},
			tr.Entry{Name: "etc/", Type: tar.TypeDir},
			tr.Entry{Name: "etc/.wh.gone.conf"},
			tr.Entry{Name: "etc/upper.conf", Body: "upper\n"},
		))
	tag, digest := reg.Push(t, "hutch-test/overlay:v1", img)
	script := `cd /opt && find . | sort | tr '\n' ' '; echo; cat f keep opq/new; ./run; ls /etc/gone.conf 2>&1 | sed 's/.*No such.*/no gone.conf/'; cat /etc/lower.conf /etc/upper.conf; ` +
		`awk '($5 == "/opt" || $5 == "/etc") && $(NF-2) == "overlay" {print $5, "overlay"}' /proc/self/mountinfo | sort -u`
	want := ". ./f ./keep ./opq ./opq/new ./run \nupper\nkeep\nupper\nran\nno gone.conf\nlower\nupper\n"
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		ownTree(t, o, ws)
		o.dir = ws
		roots := flattenedRoots(o, digest)
		mustCode(t, hutch(t, o, "image", "pull", tag), 0)
		r := hutch(t, o, "run", "--image", tag, "--", "/bin/sh", "-c", script)
		mustCode(t, r, 0)
		if w := want + "/etc overlay\n/opt overlay\n"; r.stdout != w {
			t.Errorf("got\n%s\nwant\n%s\nstderr:\n%s", r.stdout, w, r.stderr)
		}
		if _, err := os.Stat(roots); err == nil {
			t.Errorf("%s exists: the pull or the run built a flattened copy of an image whose root is its layers", roots)
		}
		if r := hutch(t, o, "plan", "--image", tag); !strings.Contains(r.stdout, "its root read-only overlays of its 3 layers") {
			t.Errorf("hutch plan does not say the root is the image's 3 layers:\n%s%s", r.stdout, r.stderr)
		}
		o.env = append(o.env, "HUTCH_IMAGE_ROOT=flattened")
		r = hutch(t, o, "run", "--image", tag, "--", "/bin/sh", "-c", script)
		mustCode(t, r, 0)
		if r.stdout != want {
			t.Errorf("HUTCH_IMAGE_ROOT=flattened: got\n%s\nwant\n%s (no overlay mounts)\nstderr:\n%s", r.stdout, want, r.stderr)
		}
		if _, err := os.Stat(roots); err != nil {
			t.Errorf("HUTCH_IMAGE_ROOT=flattened: no flattened copy: %v", err)
		}
		if r := hutch(t, o, "plan", "--image", tag); !strings.Contains(r.stdout, "its root the flattened copy") || !strings.Contains(r.stdout, "HUTCH_IMAGE_ROOT=flattened is set") {
			t.Errorf("HUTCH_IMAGE_ROOT=flattened: hutch plan does not say the root is the flattened copy and why:\n%s%s", r.stdout, r.stderr)
		}
		o.env = append(o.env, "HUTCH_IMAGE_ROOT=layered")
		r = hutch(t, o, "run", "--image", tag, "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, `HUTCH_IMAGE_ROOT="layered"`) || !strings.Contains(r.stderr, `"flattened"`) {
			t.Errorf("HUTCH_IMAGE_ROOT=layered: exit %d, stderr %q; want 125 and the variable and its valid values named", r.code, r.stderr)
		}
	})
}

// dataDir is XDG_DATA_HOME of hutch run with o.
func dataDir(o opts) string {
	if o.root {
		return filepath.Join(stateDir, "root", "data")
	}
	return filepath.Join(stateDir, "data")
}

// flattenedRoots is where the store of hutch run with o keeps the
// flattened copies of the image digest (sha256:HEX, or REF@sha256:HEX).
func flattenedRoots(o opts, digest string) string {
	return filepath.Join(dataDir(o), "hutch", "images", "roots", "sha256", digest[strings.LastIndex(digest, ":")+1:])
}

// An image that holds one layer twice (two identical build steps, or the
// empty layers some builders write) runs on overlays of its layers: the
// repeated layer is stacked once (overlayfs refuses a directory twice in
// lowerdir, ELOOP), and the merged tree is the same.
func TestImageOverlayRepeatedLayer(t *testing.T) {
	reg := tr.Start(t)
	twice := tr.Layer(t, tr.Entry{Name: "opt/", Type: tar.TypeDir}, tr.Entry{Name: "opt/same", Body: "same\n"})
	img := tr.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, tr.Busybox(t), twice,
		tr.Layer(t, tr.Entry{Name: "opt/", Type: tar.TypeDir}, tr.Entry{Name: "opt/mid", Body: "mid\n"}), twice)
	tag, _ := reg.Push(t, "hutch-test/twice:v1", img)
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--image", tag, "--", "/bin/sh", "-c",
			`cat /opt/same /opt/mid; awk '$5 == "/opt" {print $(NF-2)}' /proc/self/mountinfo`)
		mustCode(t, r, 0)
		if r.stdout != "same\nmid\noverlay\n" {
			t.Errorf("got %q, want the two layers' files through an overlay\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
}
