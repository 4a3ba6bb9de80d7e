package landlock

import (
	"errors"
	"strings"
	"testing"
)

// TestRightsPerABI pins the rights computation for every ABI with literal
// values, so a wrong constant or a missing ABI step fails.
func TestRightsPerABI(t *testing.T) {
	type want struct {
		fs, net, scoped                               uint64
		readExec, readOnly, readWrite, readWriteFiles uint64
	}
	cases := map[int]want{
		0: {},
		1: {fs: 0x1fff, readExec: 0xd, readOnly: 0xc, readWrite: 0x1fff, readWriteFiles: 0xe},
		2: {fs: 0x3fff, readExec: 0xd, readOnly: 0xc, readWrite: 0x3fff, readWriteFiles: 0xe},
		3: {fs: 0x7fff, readExec: 0xd, readOnly: 0xc, readWrite: 0x7fff, readWriteFiles: 0x400e},
		4: {fs: 0x7fff, net: 0x3, readExec: 0xd, readOnly: 0xc, readWrite: 0x7fff, readWriteFiles: 0x400e},
		5: {fs: 0xffff, net: 0x3, readExec: 0xd, readOnly: 0xc, readWrite: 0xffff, readWriteFiles: 0xc00e},
		6: {fs: 0xffff, net: 0x3, scoped: 0x3, readExec: 0xd, readOnly: 0xc, readWrite: 0xffff, readWriteFiles: 0xc00e},
		7: {fs: 0xffff, net: 0x3, scoped: 0x3, readExec: 0xd, readOnly: 0xc, readWrite: 0xffff, readWriteFiles: 0xc00e},
		// Newer kernels are used as ABI 7.
		9: {fs: 0xffff, net: 0x3, scoped: 0x3, readExec: 0xd, readOnly: 0xc, readWrite: 0xffff, readWriteFiles: 0xc00e},
	}
	for abi, w := range cases {
		r := rightsFor(abi)
		got := want{r.fs, r.net, r.scoped, r.readExec, r.readOnly, r.readWrite, r.readWriteFiles}
		if got != w {
			t.Errorf("ABI %d:\n got %+v\nwant %+v", abi, got, w)
		}
		// Every granted right must be handled, or the kernel rejects the rule.
		for _, g := range []uint64{r.readExec, r.readOnly, r.readWrite, r.readWriteFiles} {
			if g&^r.fs != 0 {
				t.Errorf("ABI %d: grant 0x%x has rights not handled (0x%x)", abi, g, r.fs)
			}
		}
	}
	// File rules: what is left after masking with fileRights.
	fileCases := map[int][4]uint64{ // readExec, readOnly, readWrite, readWriteFiles
		1: {0x5, 0x4, 0x7, 0x6},
		3: {0x5, 0x4, 0x4007, 0x4006},
		5: {0x5, 0x4, 0xc007, 0xc006},
		7: {0x5, 0x4, 0xc007, 0xc006},
	}
	for abi, w := range fileCases {
		r := rightsFor(abi)
		got := [4]uint64{r.readExec & fileRights, r.readOnly & fileRights, r.readWrite & fileRights, r.readWriteFiles & fileRights}
		if got != w {
			t.Errorf("ABI %d file rules: got %x want %x", abi, got, w)
		}
	}
}

func TestGapsPerABI(t *testing.T) {
	r := Rules{TCP: true, ScopeSignal: true, ScopeAbstractUnix: true}
	want := map[int][]int{ // required gaps' NeedABI
		1: {3, 4, 6, 6},
		2: {3, 4, 6, 6},
		3: {4, 6, 6},
		4: {6, 6},
		5: {6, 6},
		6: nil,
		7: nil,
	}
	for abi, w := range want {
		req, rep := gaps(abi, r)
		var got []int
		for _, g := range req {
			got = append(got, g.NeedABI)
		}
		if len(got) != len(w) {
			t.Errorf("ABI %d: required gaps %v, want %v", abi, got, w)
			continue
		}
		for i := range got {
			if got[i] != w[i] {
				t.Errorf("ABI %d: required gaps %v, want %v", abi, got, w)
			}
		}
		if (abi < 6) != (len(rep) > 0) {
			t.Errorf("ABI %d: reported gaps %q", abi, rep)
		}
	}
	// Without scopes requested, ABI 4 and 5 are enough for strict mode.
	if req, _ := gaps(4, Rules{}); len(req) != 0 {
		t.Errorf("ABI 4 without scopes: required %v", req)
	}
}

// TestStrictErrors checks the documented error texts (docs/LANDLOCK.md).
func TestStrictErrors(t *testing.T) {
	cases := []struct {
		abi   int
		rules Rules
		want  string
	}{
		{4, Rules{ScopeSignal: true},
			`landlock: kernel Landlock ABI 4 cannot scope signals (needs ABI 6, Linux 6.12+); set enforcement = "best-effort" or upgrade the kernel`},
		{3, Rules{TCP: true},
			`landlock: kernel Landlock ABI 3 cannot restrict TCP connect and bind (needs ABI 4, Linux 6.7+); set enforcement = "best-effort" or upgrade the kernel`},
		{2, Rules{TCP: true},
			`landlock: kernel Landlock ABI 2 cannot restrict file truncation (needs ABI 3, Linux 6.2+), nor restrict TCP connect and bind (needs ABI 4, Linux 6.7+); set enforcement = "best-effort" or upgrade the kernel`},
		{0, Rules{},
			`landlock: this kernel has no usable Landlock (ABI 0: no usable Landlock), so it cannot restrict filesystem access, TCP or scopes (needs Linux 5.13+ with Landlock enabled); set enforcement = "best-effort" or enable Landlock (CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot parameter)`},
	}
	for _, c := range cases {
		fd, rep, err := buildForABI(-1, c.abi, "", c.rules, true)
		if fd != -1 {
			t.Errorf("ABI %d strict: fd %d, want -1", c.abi, fd)
		}
		var se *StrictError
		if !errors.As(err, &se) {
			t.Fatalf("ABI %d strict: err %v, want *StrictError", c.abi, err)
		}
		if err.Error() != c.want {
			t.Errorf("ABI %d strict:\n got %s\nwant %s", c.abi, err, c.want)
		}
		if rep.ABI != c.abi || len(rep.NotEnforced) == 0 {
			t.Errorf("ABI %d strict: report %+v", c.abi, rep)
		}
	}
	// Best effort with no Landlock: no fd, no error, and the report says so.
	fd, rep, err := buildForABI(-1, 0, "the kernel has no Landlock", Rules{}, false)
	if fd != -1 || err != nil || len(rep.NotEnforced) != 1 || !strings.Contains(rep.NotEnforced[0], "the kernel has no Landlock") {
		t.Errorf("ABI 0 best effort: fd %d err %v report %+v", fd, err, rep)
	}
}

func TestRelativePathRejected(t *testing.T) {
	if _, _, err := buildForABI(-1, 7, "", Rules{ReadOnly: []string{"etc"}}, false); err == nil {
		t.Fatal("relative path accepted")
	}
}

func TestProbeFeatures(t *testing.T) {
	s := probeABI(4, "")
	if len(s.Features) != MaxKnownABI {
		t.Fatalf("%d features", len(s.Features))
	}
	for _, f := range s.Features {
		if f.Available != (f.ABI <= 4) || f.Linux == "" || f.Meaning == "" {
			t.Errorf("feature %+v", f)
		}
	}
	if out := probeABI(0, "why").String(); !strings.Contains(out, "not available: why") {
		t.Errorf("status text %q", out)
	}
}
