package seccompprofiles

import "slices"

// ChownCalls are the calls FakeChown answers with success.
var ChownCalls = []string{"chown", "fchown", "lchown", "fchownat"}

// FakeChownComment marks the rule FakeChown adds (quiet: no denial is
// reported for it, it is no denial).
const FakeChownComment = QuietPrefix + "image build: chown succeeds without changing anything (one uid in the step's user namespace)"

// FakeChown returns a copy of p in which ChownCalls return 0 without
// doing anything: the profile of an image build's run step (hutch image
// build). The step's user namespace maps one id, 0, to the invoking user:
// every file is already owned by 0:0 there, so a chown to 0 (or -1) is a
// no-op anyway, and a chown to any other id, which the kernel refuses
// (EINVAL: not mapped), is what dpkg and tar do for packages' files owned
// by other users. The layer records every file as 0:0 (docs/IMAGES.md,
// Building images). The calls are taken out of p's rules, as in
// AllowPtrace, so that no rule of p decides them.
func FakeChown(p *Profile) *Profile {
	zero := uint(0)
	return withOwnRule(p, Syscall{Names: slices.Clone(ChownCalls), Action: ActErrno, ErrnoRet: &zero, Comment: FakeChownComment})
}
