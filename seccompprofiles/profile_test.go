package seccompprofiles

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseDockerProfile(t *testing.T) {
	p, err := LoadFile("testdata/docker-small.json")
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "testdata/docker-small.json" {
		t.Errorf("Source = %q", p.Source)
	}
	if p.DefaultAction != ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Errorf("default = %s %v", p.DefaultAction, p.DefaultErrnoRet)
	}
	if len(p.ArchMap) != 2 || p.ArchMap[0].Architecture != "SCMP_ARCH_X86_64" ||
		strings.Join(p.ArchMap[0].SubArchitectures, ",") != "SCMP_ARCH_X86,SCMP_ARCH_X32" {
		t.Errorf("archMap = %+v", p.ArchMap)
	}
	if len(p.Syscalls) != 11 {
		t.Fatalf("%d syscalls, want 11", len(p.Syscalls))
	}
	if s := p.Syscalls[1]; s.Name != "close" || len(s.Names) != 0 || strings.Join(s.AllNames(), ",") != "close" {
		t.Errorf("legacy name entry = %+v", s)
	}
	if s := p.Syscalls[3]; len(s.Args) != 1 || s.Args[0] != (Arg{Index: 0, Value: 0x7E020000, ValueTwo: 0, Op: OpMaskedEqual}) ||
		s.Excludes == nil || strings.Join(s.Excludes.Caps, ",") != "CAP_SYS_ADMIN" {
		t.Errorf("clone entry = %+v", s)
	}
	if s := p.Syscalls[9]; s.ErrnoRet == nil || *s.ErrnoRet != 13 || s.Comment != "keyring is not namespaced" {
		t.Errorf("keyctl entry = %+v", s)
	}
	if p.Syscalls[0].Includes != nil || p.Syscalls[0].Excludes != nil {
		t.Errorf("empty includes/excludes should decode as nil: %+v", p.Syscalls[0])
	}
	// The unknown name of an applicable rule is a warning; the one of a
	// ppc64le-only rule is not looked at.
	want := `$.syscalls[0].names[4]: unknown syscall "hutch_no_such_syscall" skipped`
	if len(p.Warnings) != 1 || p.Warnings[0] != want {
		t.Errorf("Warnings = %q, want [%q]", p.Warnings, want)
	}
}

func TestEffectiveRulesDockerSemantics(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test profile's includes are written for amd64; running on " + runtime.GOARCH)
	}
	p, err := LoadFile("testdata/docker-small.json")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.rules() {
		s := r.name + ":" + r.action
		if len(r.conds) > 0 {
			s += "[" + condString(r.conds) + "]"
		}
		got = append(got, s)
	}
	want := []string{
		"read:SCMP_ACT_ALLOW", "write:SCMP_ACT_ALLOW", "exit_group:SCMP_ACT_ALLOW", "getpid:SCMP_ACT_ALLOW",
		"close:SCMP_ACT_ALLOW",
		// Two conditions on the same argument: two rules (OR), as runc does.
		"personality:SCMP_ACT_ALLOW[arg0 == 0x0]", "personality:SCMP_ACT_ALLOW[arg0 == 0x8]",
		// excludes.caps never excludes: hutch grants no capabilities.
		"clone:SCMP_ACT_ALLOW[arg0 & 0x7e020000 == 0x0]",
		// includes.caps (clone, mount) never applies; includes.arches amd64 does.
		"arch_prctl:SCMP_ACT_ALLOW",
		// minKernel 3.2 applies, 99.0 does not (gettid).
		"getppid:SCMP_ACT_ALLOW",
		"keyctl:SCMP_ACT_ERRNO",
		"uname:SCMP_ACT_KILL_PROCESS",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("effective rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

const validActionList = "SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL, SCMP_ACT_KILL_PROCESS, SCMP_ACT_KILL_THREAD, SCMP_ACT_TRAP, SCMP_ACT_LOG, SCMP_ACT_TRACE, SCMP_ACT_NOTIFY"

func TestParseErrors(t *testing.T) {
	ok := `{"names": ["read"], "action": "SCMP_ACT_ALLOW"}`
	cases := []struct {
		name, json, want string
	}{
		{
			"unknown action",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [` + ok + `,` + ok + `,` + ok + `,
			  {"names": ["write"], "action": "SCMP_ACT_FOO"}]}`,
			`seccomp profile /x/p.json: $.syscalls[3].action: unknown action "SCMP_ACT_FOO" (valid: ` + validActionList + `)`,
		},
		{
			"unknown operator",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [` + ok + `,` + ok + `,` + ok + `,` + ok + `,` + ok + `,
			  {"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 5, "op": "SCMP_CMP_FOO"}]}]}`,
			`seccomp profile /x/p.json: $.syscalls[5].args[0].op: unknown operator "SCMP_CMP_FOO" (valid: SCMP_CMP_NE, SCMP_CMP_LT, SCMP_CMP_LE, SCMP_CMP_EQ, SCMP_CMP_GE, SCMP_CMP_GT, SCMP_CMP_MASKED_EQ)`,
		},
		{
			"no names",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [` + ok + `,` + ok + `, {"names": [], "action": "SCMP_ACT_ALLOW"}]}`,
			`seccomp profile /x/p.json: $.syscalls[2]: no syscall names`,
		},
		{
			"unknown field in a rule",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"nmes": ["read"], "action": "SCMP_ACT_ALLOW"}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].nmes: unknown field "nmes" (valid: names, name, action, errnoRet, args, comment, includes, excludes)`,
		},
		{
			"unknown top-level field",
			`{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrno": 1}`,
			`seccomp profile /x/p.json: $.defaultErrno: unknown field "defaultErrno" (valid: defaultAction, defaultErrnoRet, architectures, archMap, flags, listenerPath, listenerMetadata, syscalls)`,
		},
		{
			"unknown field in args",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ", "valueThree": 2}]}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].args[0].valueThree: unknown field "valueThree" (valid: index, value, valueTwo, op)`,
		},
		{
			"missing default action",
			`{"syscalls": []}`,
			`seccomp profile /x/p.json: $.defaultAction: missing (valid: ` + validActionList + `)`,
		},
		{
			"missing rule action",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"]}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].action: missing (valid: ` + validActionList + `)`,
		},
		{
			"errnoRet of the wrong type",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": "EPERM"}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].errnoRet: expected an unsigned integer, got string`,
		},
		{
			"errnoRet out of range",
			`{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 70000}`,
			`seccomp profile /x/p.json: $.defaultErrnoRet: 70000 is out of range (0 to 4095)`,
		},
		{
			"argument index out of range",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}]}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].args[0].index: 6 is out of range (0 to 5)`,
		},
		{
			"negative value",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}]}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].args[0].value: expected an unsigned integer (0 to 18446744073709551615), got -1`,
		},
		{
			"empty syscall name",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [` + ok + `, {"names": ["read", ""], "action": "SCMP_ACT_ALLOW"}]}`,
			`seccomp profile /x/p.json: $.syscalls[1].names[1]: empty syscall name`,
		},
		{
			"names not an array",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": "read", "action": "SCMP_ACT_ALLOW"}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].names: expected an array, got string`,
		},
		{
			"unknown capability",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_FLY"]}}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].includes.caps[0]: unknown capability "CAP_FLY" (valid: CAP_* names such as CAP_SYS_ADMIN, CAP_SYS_PTRACE)`,
		},
		{
			"bad minKernel",
			`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "excludes": {"minKernel": "five"}}]}`,
			`seccomp profile /x/p.json: $.syscalls[0].excludes.minKernel: invalid kernel version "five" (valid: MAJOR.MINOR, e.g. "5.8")`,
		},
		{
			"architectures and archMap",
			`{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}`,
			`seccomp profile /x/p.json: $: both "architectures" and "archMap" are set; use one of them`,
		},
		{
			"not an object",
			`["SCMP_ACT_ALLOW"]`,
			`seccomp profile /x/p.json: $: expected an object, got array`,
		},
		{
			"syntax error",
			"{\"defaultAction\": \"SCMP_ACT_ALLOW\",\n \"syscalls\": [}",
			`seccomp profile /x/p.json: invalid JSON at byte 50 (line 2, column 15): invalid character '}' looking for beginning of value`,
		},
		{
			"truncated",
			"{\"defaultAction\": \"SCMP_ACT_ALLOW\",\n",
			`seccomp profile /x/p.json: invalid JSON at byte 36 (line 2, column 1): unexpected end of input`,
		},
		{
			"trailing data",
			"{\"defaultAction\": \"SCMP_ACT_ALLOW\"}\n\n }",
			`seccomp profile /x/p.json: invalid JSON at byte 38 (line 3, column 2): unexpected data after the top-level value`,
		},
		{
			"empty",
			"",
			`seccomp profile /x/p.json: invalid JSON at byte 0 (line 1, column 1): unexpected end of input`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.json), "/x/p.json")
			if err == nil {
				t.Fatalf("no error, want %s", c.want)
			}
			if err.Error() != c.want {
				t.Errorf("error:\n got %s\nwant %s", err, c.want)
			}
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Errorf("error is %T, want *ProfileError", err)
			}
		})
	}
}

func TestParseUnknownArchitectureListsValid(t *testing.T) {
	_, err := Parse([]byte(`{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_Z80"]}`), "p.json")
	want := `seccomp profile p.json: $.architectures[1]: unknown architecture "SCMP_ARCH_Z80" (valid: SCMP_ARCH_X86, SCMP_ARCH_X86_64, SCMP_ARCH_X32, `
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %s", err, want)
	}
}

func TestParseWarnsAboutIgnoredFields(t *testing.T) {
	p, err := Parse([]byte(`{
		"defaultAction": "SCMP_ACT_ALLOW",
		"flags": ["SECCOMP_FILTER_FLAG_LOG"],
		"listenerPath": "/run/agent.sock",
		"syscalls": [{"names": ["read"], "action": "SCMP_ACT_LOG", "errnoRet": 1}]
	}`), "p.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"$.flags: ignored: hutch's loader chooses the filter flags",
		"$.listenerPath: ignored: hutch's supervisor serves SCMP_ACT_NOTIFY itself",
		"$.syscalls[0].errnoRet: ignored: SCMP_ACT_LOG takes no errno",
	}
	if strings.Join(p.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("Warnings:\n%s\nwant:\n%s", strings.Join(p.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.json")
	_, err := LoadFile(path)
	if err == nil || !strings.HasPrefix(err.Error(), "seccomp profile "+path+": ") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v", err)
	}
}

func TestDefaultProfile(t *testing.T) {
	p := Default()
	if p.Source != DefaultSource || p.DefaultAction != ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 38 {
		t.Fatalf("default profile head: %s %s %v", p.Source, p.DefaultAction, p.DefaultErrnoRet)
	}
	if runtime.GOARCH == "amd64" && len(p.Warnings) != 0 {
		t.Errorf("default profile warnings on amd64: %q", p.Warnings)
	}
	for i, s := range p.Syscalls {
		if strings.TrimSpace(s.Comment) == "" {
			t.Errorf("$.syscalls[%d] (%v) has no comment", i, s.AllNames())
		}
	}
	// Each call returns an independent copy.
	p.Syscalls[0].Names[0] = "changed"
	*p.DefaultErrnoRet = 1
	q := Default()
	if q.Syscalls[0].Names[0] == "changed" || *q.DefaultErrnoRet != 38 {
		t.Error("Default() returned shared state")
	}
	// The embedded JSON round-trips through the canonical form.
	r, err := Parse(DefaultJSON(), "again")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Syscalls) != len(q.Syscalls) {
		t.Error("DefaultJSON differs from Default")
	}
}

func TestDescribeDefault(t *testing.T) {
	out := Describe(Default())
	for _, want := range []string{
		"seccomp profile: default\n",
		"default action:  SCMP_ACT_ERRNO (ENOSYS, errno 38)\n",
		"\nallowed (",
		"  clone: arg0 & 0x7e020000 == 0x0\n",
		"  ioctl when arg1 & 0xffffffff == 0x5412 -> EPERM\n",
		"  clone3 -> ENOSYS, quiet fallback\n",
		"  add_key, keyctl, request_key -> EPERM\n",
		"      The kernel keyring is shared kernel state",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Describe output lacks %q:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if len(line) > describeWidth {
			t.Errorf("line %d longer than %d: %q", i+1, describeWidth, line)
		}
	}
	if strings.Contains(out, "warnings:") {
		t.Errorf("default profile shows warnings:\n%s", out)
	}
}

func TestDescribeDockerProfile(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test profile's archMap and includes are written for amd64; running on " + runtime.GOARCH)
	}
	p, err := LoadFile("testdata/docker-small.json")
	if err != nil {
		t.Fatal(err)
	}
	out := Describe(p)
	for _, want := range []string{
		"seccomp profile: testdata/docker-small.json\n",
		"default action:  SCMP_ACT_ERRNO (EPERM, errno 1)\n",
		"architectures:   amd64 (native), x86, x32;",
		"allowed (7):\n  arch_prctl close exit_group getpid getppid read write\n",
		"allowed when:\n  personality: arg0 == 0x0\n  personality: arg0 == 0x8\n  clone: arg0 & 0x7e020000 == 0x0\n",
		"denied:\n  keyctl -> EACCES\n      keyring is not namespaced\n",
		"other actions:\n  uname -> SCMP_ACT_KILL_PROCESS\n",
		"warnings:\n  $.syscalls[0].names[4]: unknown syscall \"hutch_no_such_syscall\" skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Describe output lacks %q:\n%s", want, out)
		}
	}
}

// LoadFile and ReadFile read at most MaxProfileSize bytes, from a regular
// file only (see TestLoadRefusesSpecialAndLargeFiles in package policy).
func TestLoadFileRefusesSpecialAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "x": "`+strings.Repeat("x", MaxProfileSize)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{big, "seccomp profile " + big + " is larger than 4MiB, the most hutch reads"},
		{fifo, "seccomp profile " + fifo + " is a FIFO, not a regular file: pass a file of at most 4MiB"},
		{"/dev/zero", "seccomp profile /dev/zero is a character device, not a regular file: pass a file of at most 4MiB"},
	} {
		done := make(chan error, 1)
		go func() { _, err := LoadFile(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || err.Error() != tc.want {
				t.Errorf("LoadFile(%s) error = %v; want %s", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("LoadFile(%s) did not return within 10s", tc.path)
		}
	}
}
