package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestMarshalRoundTrip(t *testing.T) {
	for name, p := range map[string]*Policy{
		"default": Default(),
		"full":    fullPolicy(),
		"awkward strings": func() *Policy {
			p := fullPolicy()
			p.Network.Allow[0].Reason = "quotes \" and \\ backslash\tand a tab\nand a line # not a comment"
			p.Environment.Set["PS1"] = `\u@\h:\w$ `
			p.Filesystem.Workspace = "/home/dev/my project"
			return p
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			data, err := p.Marshal()
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if !strings.HasPrefix(string(data), "# hutch sandbox policy") {
				t.Errorf("Marshal output lacks the header comment:\n%s", data)
			}
			back, err := Parse(data, "shown.toml")
			if err != nil {
				t.Fatalf("Parse(Marshal()): %v\n%s", err, data)
			}
			if !reflect.DeepEqual(back, p) {
				t.Errorf("round trip changed the policy:\n got %+v\nwant %+v\n%s", back, p, data)
			}
		})
	}
}

func TestMarshalDefaultValues(t *testing.T) {
	data, err := Default().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`version = 1`,
		`enforcement = "best-effort"`,
		`uid = 1000`,
		`tooling = "host"`,
		`protected = [".git/hooks", ".git/config"]`,
		`tmp_size = "512MiB"`,
		`home_size = "256MiB"`,
		`shm_size = "64MiB"`,
		`cpus = 2`,
		`memory = "2GiB"`,
		`pids = 512`,
		`file_size = "1GiB"`,
		`open_files = 4096`,
		`timeout = "10m"`,
		`mode = "proxy"`,
		`discover_registries = true`,
		`session_idle = "30m"`,
		`session_max = "8h"`,
		`pass = ["PATH", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ"]`,
		`profile = ""`,
	} {
		if !strings.Contains(string(data), "\n"+line+"\n") {
			t.Errorf("Marshal(Default()) lacks the line %s", line)
		}
	}
}

// TestMarshalWritesEveryKey guards against a field added to Policy but not
// to Marshal: every TOML key of the policy's types must appear in the output
// of a policy with every list non-empty.
func TestMarshalWritesEveryKey(t *testing.T) {
	data, err := fullPolicy().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := tomlKey(f)
			if key == "-" {
				continue
			}
			full := strings.TrimPrefix(prefix+"."+key, ".")
			ft := f.Type
			switch {
			case ft.Kind() == reflect.Struct:
				if !strings.Contains(out, "\n["+full+"]\n") {
					t.Errorf("Marshal does not write the table [%s]", full)
				}
				walk(full, ft)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				if !strings.Contains(out, "\n[["+full+"]]\n") {
					t.Errorf("Marshal does not write [[%s]]", full)
				}
				walk(full, ft.Elem())
			case ft.Kind() == reflect.Map:
				if !strings.Contains(out, "\n["+full+"]\n") {
					t.Errorf("Marshal does not write the table [%s]", full)
				}
			default:
				if !strings.Contains(out, "\n"+key+" = ") {
					t.Errorf("Marshal does not write %s", full)
				}
			}
		}
	}
	walk("", reflect.TypeOf(Policy{}))
}
