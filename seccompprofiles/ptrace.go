package seccompprofiles

import "slices"

// PtraceCalls are the calls policy seccomp.ptrace (on by default) allows: what gdb, strace,
// ltrace and py-spy need to trace and read a process. pidfd_getfd stays
// with the profile (no debugger needs another process's descriptors).
var PtraceCalls = []string{"ptrace", "process_vm_readv", "process_vm_writev"}

// PtraceMinKernel is the first kernel that checks seccomp again after a
// tracer changed a call.
const PtraceMinKernel = "4.8"

// PtraceComment marks the rule AllowPtrace adds.
const PtraceComment = "hutch: seccomp.ptrace allows debuggers and tracers among a command's own processes"

// PtraceHint is what a denial of one of PtraceCalls tells the caller.
const PtraceHint = "to let debuggers and tracers (gdb, strace) trace the command's own processes, pass --allow-ptrace or set seccomp.ptrace = true in the policy (docs/SECCOMP.md)"

// AllowPtrace returns a copy of p in which PtraceCalls are allowed without
// conditions: they are taken out of every rule of p and allowed by one rule
// of their own, so that no rule of p can deny them (libseccomp refuses two
// actions for one call).
//
// The boundary does not rest on seccomp here: the kernel (Linux 4.8 and
// later) checks seccomp again after a tracer changes a call, so a tracer
// cannot use ptrace to get around the filter; ptrace needs the same uid and
// a dumpable target, and hutch's own processes are not dumpable; and
// Landlock lets a process trace only processes in its own domain or one
// nested in it, which keeps a session's commands (each in a domain of its
// own beneath the spawner's) from tracing the spawner or each other.
func AllowPtrace(p *Profile) *Profile {
	return withOwnRule(p, Syscall{Names: slices.Clone(PtraceCalls), Action: ActAllow, Comment: PtraceComment})
}

// withOwnRule returns a copy of p in which rule alone decides rule.Names:
// they are taken out of every rule of p (a rule left with no name goes)
// and rule is added.
func withOwnRule(p *Profile, rule Syscall) *Profile {
	q := p.Clone()
	kept := q.Syscalls[:0]
	for _, r := range q.Syscalls {
		if slices.Contains(rule.Names, r.Name) {
			r.Name = ""
		}
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool { return slices.Contains(rule.Names, n) })
		if r.Name == "" && len(r.Names) == 0 {
			continue
		}
		kept = append(kept, r)
	}
	q.Syscalls = append(kept, rule)
	return q
}
