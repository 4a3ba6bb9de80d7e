package containerseccomp

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// allowed says whether p allows name unconditionally (a rule without
// arguments whose action is allow).
func allowed(p *specs.LinuxSeccomp, name string) bool {
	for _, s := range p.Syscalls {
		if s.Action == specs.ActAllow && len(s.Args) == 0 && slices.Contains(s.Names, name) {
			return true
		}
	}
	return false
}

func rulesFor(p *specs.LinuxSeccomp, name string) []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, name) {
			out = append(out, s)
		}
	}
	return out
}

// TestDockerDefaultShape pins what Docker's default does that hutch's
// diagnosis and additions rely on: it refuses namespace creation and
// mounts by default (EPERM), allows clone only without namespace flags,
// answers clone3 with ENOSYS, and allows Landlock, seccomp and prctl.
func TestDockerDefaultShape(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		p, err := DockerDefault(arch)
		if err != nil {
			t.Fatal(err)
		}
		if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
			t.Errorf("%s: default action %s errno %v, want SCMP_ACT_ERRNO with EPERM", arch, p.DefaultAction, p.DefaultErrnoRet)
		}
		for _, n := range []string{"unshare", "setns", "mount", "umount2", "pivot_root", "mount_setattr", "sethostname", "setdomainname", "bpf", "keyctl", "open_by_handle_at"} {
			if len(rulesFor(p, n)) != 0 {
				t.Errorf("%s: Docker's default has a rule for %s, want none (refused)", arch, n)
			}
		}
		for _, n := range []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "seccomp", "prctl", "ptrace", "pidfd_open", "execve", "wait4"} {
			if !allowed(p, n) {
				t.Errorf("%s: Docker's default does not allow %s", arch, n)
			}
		}
		clone := rulesFor(p, "clone")
		if len(clone) != 1 || len(clone[0].Args) != 1 || clone[0].Args[0].Op != specs.OpMaskedEqual || clone[0].Args[0].Index != 0 ||
			clone[0].Args[0].Value != 0x7E020000 || clone[0].Args[0].ValueTwo != 0 {
			t.Errorf("%s: clone rules %+v, want one masked-equal rule refusing the namespace flags", arch, clone)
		}
		c3 := rulesFor(p, "clone3")
		if len(c3) != 1 || c3[0].Action != specs.ActErrno || c3[0].ErrnoRet == nil || *c3[0].ErrnoRet != 38 {
			t.Errorf("%s: clone3 rules %+v, want ENOSYS", arch, c3)
		}
		if n := len(rulesFor(p, "read")); n != 1 {
			t.Errorf("%s: %d rules for read, want 1", arch, n)
		}
	}
	if _, err := DockerDefault("mips"); err == nil {
		t.Errorf("DockerDefault(mips) succeeded, want an error naming the known architectures")
	}
}

// TestHutchAdds: hutch's profile is Docker's with exactly the additions,
// and nothing Docker allows is lost.
func TestHutchAdds(t *testing.T) {
	d, _ := DockerDefault("amd64")
	h, err := Hutch("amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range HutchAdditions {
		for _, n := range a.Names {
			if !allowed(h, n) {
				t.Errorf("hutch's profile does not allow %s (%s)", n, a.Why)
			}
			if allowed(d, n) {
				t.Errorf("%s is an addition but Docker's default allows it already", n)
			}
		}
	}
	for _, n := range []string{"clone", "clone3"} {
		if r := rulesFor(h, n); len(r) != 1 {
			t.Errorf("hutch's profile has %d rules for %s, want the one unconditional allow", len(r), n)
		}
	}
	for _, s := range d.Syscalls {
		for _, n := range s.Names {
			if n == "clone" || n == "clone3" {
				continue
			}
			if !slices.ContainsFunc(h.Syscalls, func(x specs.LinuxSyscall) bool {
				return slices.Contains(x.Names, n) && x.Action == s.Action && slices.Equal(x.Args, s.Args)
			}) {
				t.Errorf("hutch's profile lost Docker's rule for %s", n)
			}
		}
	}
	for _, n := range []string{"bpf", "keyctl", "setdomainname", "open_tree", "move_mount", "fsopen", "kexec_load", "init_module"} {
		if len(rulesFor(h, n)) != 0 {
			t.Errorf("hutch's profile has a rule for %s, which hutch does not call", n)
		}
	}
}
