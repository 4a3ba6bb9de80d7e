package policy

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// docs/POLICY.md is the spec; these tests keep it and the code in step.

func readPolicyDoc(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../docs/POLICY.md")
	if err != nil {
		t.Fatalf("read the policy document: %v", err)
	}
	return string(data)
}

// TestDocExample parses the document's complete example, which sets every
// key to its default and adds one entry to each list empty by default.
func TestDocExample(t *testing.T) {
	doc := readPolicyDoc(t)
	_, rest, ok := strings.Cut(doc, "## Complete example")
	if !ok {
		t.Fatal(`POLICY.md has no "## Complete example" section`)
	}
	_, rest, ok = strings.Cut(rest, "```toml\n")
	if !ok {
		t.Fatal("the complete example has no ```toml block")
	}
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the complete example's ```toml block is not closed")
	}
	got, err := Parse([]byte(example), "POLICY.md example")
	if err != nil {
		t.Fatalf("the complete example does not parse:\n%v", err)
	}
	want := Default()
	want.Filesystem.ReadOnly = []Bind{{Source: "/srv/datasets", Target: "/data"}}
	want.Filesystem.Cache = []Cache{{Name: "sccache", Target: "/home/sandbox/.cache/sccache", Scope: CacheScopeWorkspace, Size: GiB, Env: []string{"SCCACHE_DIR"}}}
	want.Network.Allow = []AllowEntry{
		{Host: "registry.example.com", Ports: []int{443}, Reason: "package downloads for the build"},
		{Host: "mirror.example.internal", Ports: []int{8080}, Addresses: []string{"10.20.0.5"}, Reason: "the team's package mirror"},
	}
	want.Network.Publish = []PublishEntry{{HostAddress: "127.0.0.1", HostPort: 18080, SandboxPort: 8080}}
	want.Environment.Set = map[string]string{"CI": "1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the complete example is not the default policy plus its list entries:\n got %+v\nwant %+v", got, want)
	}
	// Every key appears in the example, except obsolete ones (still
	// accepted, no effect, listed in the key reference).
	obsolete := map[string]bool{"network.local_ports": true}
	for _, key := range allKeys() {
		if obsolete[key] {
			continue
		}
		last := key[strings.LastIndexByte(key, '.')+1:]
		if !strings.Contains(example, "\n"+last+" = ") && !strings.Contains(example, "["+key+"]") {
			t.Errorf("the complete example lacks %s", key)
		}
	}
}

// TestDocKeyReference checks that the key reference names every key.
func TestDocKeyReference(t *testing.T) {
	doc := readPolicyDoc(t)
	for _, key := range allKeys() {
		if !strings.Contains(doc, "| `"+key+"` |") {
			t.Errorf("POLICY.md's key reference lacks %s", key)
		}
	}
}

// TestDocDefaults checks the defaults the document states in prose.
func TestDocDefaults(t *testing.T) {
	doc := readPolicyDoc(t)
	d := Default()
	for _, s := range []string{
		"uid 1000, gid 1000",
		"**`hutch`**",
		"**`.git/hooks`, `.git/config`**",
		"**" + d.Filesystem.TmpSize.String() + "** (`filesystem.tmp_size`)",
		"**" + d.Filesystem.HomeSize.String() + "** (`filesystem.home_size`)",
		"**" + d.Filesystem.ShmSize.String() + "** (`filesystem.shm_size`)",
		"**" + d.Resources.Memory.String() + "** (at least " + MinMemory.String() + ")",
		"**" + d.Resources.FileSize.String() + "** per file",
		"**" + d.Resources.Timeout.String() + "** wall clock",
		"**`lifecycle.session_idle` = " + d.Lifecycle.SessionIdle.String() + "**",
		"**`lifecycle.session_max` = " + d.Lifecycle.SessionMax.String() + "**",
		"default **[443]**",
		"**`PATH`, `TERM`, `LANG`, `LANGUAGE`,\n   `LC_*`, `TZ`**",
		"`PATH=" + DefaultPath + "`",
		"**`HOME=" + SandboxHome + "`, `USER=sandbox`, `LOGNAME=sandbox`, `SHELL=/bin/sh`**",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("POLICY.md does not say %q", s)
		}
	}
}

// allKeys lists every dotted key of the policy, arrays of tables as
// "network.allow[].host".
func allKeys() []string {
	var keys []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if tomlKey(f) == "-" {
				continue
			}
			key := strings.TrimPrefix(prefix+"."+tomlKey(f), ".")
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(key, f.Type)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				keys = append(keys, key)
				walk(key+"[]", f.Type.Elem())
			default:
				keys = append(keys, key)
			}
		}
	}
	walk("", reflect.TypeOf(Policy{}))
	return keys
}
