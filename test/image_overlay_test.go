package test

import (
	"archive/tar"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// With HUTCH_IMAGE_OVERLAY=1 an image's directories shared by layers are
// read-only overlays of them (mountinfo says overlay at /opt), showing
// exactly the merged view: a whiteout deletes, an opaque directory hides
// the lower one's content, an upper file replaces a lower one, and a
// lower layer's program runs.
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
		),
		tr.Layer(t,
			tr.Entry{Name: "opt/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/.wh.gone"},
			tr.Entry{Name: "opt/opq/", Type: tar.TypeDir},
			tr.Entry{Name: "opt/opq/.wh..wh..opq"},
			tr.Entry{Name: "opt/opq/new", Body: "upper\n"},
			tr.Entry{Name: "opt/f", Body: "upper\n"},
		))
	tag, _ := reg.Push(t, "hutch-test/overlay:v1", img)
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		ownTree(t, o, ws)
		o.dir = ws
		o.env = append(o.env, "HUTCH_IMAGE_OVERLAY=1")
		mustCode(t, hutch(t, o, "image", "pull", tag), 0)
		r := hutch(t, o, "run", "--image", tag, "--", "/bin/sh", "-c",
			`cd /opt && find . | sort | tr '\n' ' '; echo; cat f keep opq/new; ./run; awk '$5 == "/opt" {print "fstype", $(NF-2)}' /proc/self/mountinfo`)
		mustCode(t, r, 0)
		want := ". ./f ./keep ./opq ./opq/new ./run \nupper\nkeep\nupper\nran\nfstype overlay\n"
		if r.stdout != want {
			t.Errorf("got\n%s\nwant\n%s\nstderr:\n%s", r.stdout, want, r.stderr)
		}
	})
}
