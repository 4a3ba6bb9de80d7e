package imagebuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSpec(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "build.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "a"), []byte("a"), 0o644)
	os.Symlink("/etc", filepath.Join(dir, "etc-link"))
	p := writeSpec(t, dir, `
from = "example.com/base@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
[network]
allow = ["deb.debian.org:80"]
[[step]]
run = "echo hi > /x"
cache = false
[[step]]
copy = "src"
to = "/opt/src/"
[[step]]
env = { B = "2", A = "1" }
[[step]]
workdir = "/opt/src"
`)
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, st := range s.Steps {
		texts = append(texts, st.Text())
	}
	want := `run echo hi > /x|copy src /opt/src|env A="1" B="2"|workdir /opt/src`
	if got := strings.Join(texts, "|"); got != want {
		t.Errorf("steps %s, want %s", got, want)
	}
	if !s.Steps[0].NoCache || s.Steps[1].NoCache {
		t.Errorf("cache = false: NoCache %v, %v", s.Steps[0].NoCache, s.Steps[1].NoCache)
	}
	if s.Context != dir || len(s.Allow) != 1 {
		t.Errorf("context %s allow %v", s.Context, s.Allow)
	}

	for _, c := range []struct{ text, want string }{
		{`[[step]]
run = "true"`, "from: missing"},
		{`from = "x"
[[step]]
bogus = 1`, "step.bogus: unknown key"},
		{`from = "x"
colour = "red"
[[step]]
run = "true"`, "colour: unknown key"},
		{`from = "x"`, "step: no steps"},
		{`from = "x"
[[step]]
copy = "../outside"
to = "/x"`, `step[1].copy: "../outside": want a path inside the build context`},
		{`from = "x"
[[step]]
copy = "etc-link/passwd"
to = "/x"`, "outside the build context"},
		{`from = "x"
[[step]]
copy = "missing"
to = "/x"`, "not in the build context"},
		{`from = "x"
[[step]]
copy = "src"`, "step[1].to: copy needs to"},
		{`from = "x"
[[step]]
run = "true"
workdir = "/"`, "step[1]: more than one kind (run, workdir)"},
		{`from = "x"
[[step]]
workdir = "rel"`, `step[1].workdir: "rel": want an absolute path`},
		{`from = "x"
[[step]]
to = "/x"`, "step[1].to: to belongs to a copy step"},
		{`from = "x"
[[step]]
workdir = "/"
cache = false`, "step[1].cache: cache belongs to a run step"},
		{`from = "x"
[[step]]
run = "true"
cache = "no"`, "step.cache"},
		{`from = "rootfs:nowhere"
[[step]]
workdir = "/"`, "from: rootfs:nowhere is not a directory"},
		{`from = "x"
[[step]]
run = 3`, "step.run"},
		{`from = "x"
[network]
allow = ["deb.debian.org:http"]
[[step]]
run = "true"`, `network.allow[0]: "deb.debian.org:http": want HOST or HOST:PORT (a port 1-65535)`},
	} {
		_, err := Parse([]byte(c.text), filepath.Join(dir, "b.toml"))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, "b.toml")) {
			t.Errorf("spec:\n%s\nerror %v, want one naming the file and %q", c.text, err, c.want)
		}
	}
}
