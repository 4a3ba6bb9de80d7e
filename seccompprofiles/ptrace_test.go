package seccompprofiles

import (
	"slices"
	"testing"
)

// AllowPtrace takes the tracing calls out of every rule (the default
// profile denies them with a rule of their own) and allows them once; the
// rest of the profile is unchanged, and the result compiles.
func TestAllowPtrace(t *testing.T) {
	p := Default()
	q := AllowPtrace(p)
	var allowed, denied int
	for _, r := range q.Syscalls {
		for _, n := range append(slices.Clone(r.Names), r.Name) {
			if !slices.Contains(PtraceCalls, n) {
				continue
			}
			if r.Action == ActAllow && len(r.Args) == 0 && r.Comment == PtraceComment {
				allowed++
			} else {
				denied++
			}
		}
	}
	if allowed != len(PtraceCalls) || denied != 0 {
		t.Errorf("%d tracing calls allowed, %d in other rules", allowed, denied)
	}
	// pidfd_getfd, which shared the default's rule, is still denied.
	if r := ruleFor(q, "pidfd_getfd"); r == nil || r.Action == ActAllow {
		t.Errorf("pidfd_getfd: %+v", r)
	}
	if r := ruleFor(p, "ptrace"); r == nil || r.Action == ActAllow {
		t.Errorf("AllowPtrace changed its argument: %+v", r)
	}
	if _, err := Compile(q, Options{}); err != nil {
		t.Fatalf("the profile with ptrace allowed does not compile: %v", err)
	}
}

func ruleFor(p *Profile, name string) *Syscall {
	for i, r := range p.Syscalls {
		if r.Name == name || slices.Contains(r.Names, name) {
			return &p.Syscalls[i]
		}
	}
	return nil
}

func TestDenialHint(t *testing.T) {
	for _, n := range PtraceCalls {
		if denialHint(n) != PtraceHint {
			t.Errorf("%s: %q", n, denialHint(n))
		}
	}
	if denialHint("keyctl") != "see docs/SECCOMP.md" {
		t.Errorf("keyctl: %q", denialHint("keyctl"))
	}
}
