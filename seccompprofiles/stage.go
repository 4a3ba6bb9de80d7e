package seccompprofiles

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// need says how much the exec stage depends on a system call.
type need int

const (
	// required: denied, the command cannot start, its end goes unreported
	// or what it leaves behind survives.
	required need = iota
	// fallback: the stage copes with an error (it has another way, or
	// does without), but not with a process killed on the call.
	fallback
)

// stageCall is a system call the exec stage makes once the filter is
// loaded. names are alternatives by architecture: the first one the native
// architecture has is checked (glibc's vfork is clone on arm64).
type stageCall struct {
	names []string
	why   string
	need  need
}

// execStageNeeds are the system calls that hutch's exec stage and the
// command's reaper (nsjail/execstage.c: the hardening steps after
// HUTCH_HARDEN_SECCOMP — subreaper, descriptors, rlimits — then
// hutch_start_command, reaper, take_terminal, kill_all, children, report_end, mirror,
// hutch_fail) make after loading the filter, as glibc 2.36 makes them (setrlimit is
// prlimit64, nanosleep clock_nanosleep, waitpid wait4, sigwaitinfo
// rt_sigtimedwait, opendir openat and newfstatat). THIS LIST MUST FOLLOW
// execstage.c: a call added there after load_seccomp belongs here, or a
// profile that denies it breaks the stage without a word, since once the
// filter is loaded the stage cannot even write why it failed.
//
// Not here: sendmsg, which only a notifying filter needs (Compile falls
// back to a plain one when the profile denies it), and sched_yield, which
// only a session's spawned commands call, and those run only under the
// built-in profile (spawner.go), as does the spawner itself.
var execStageNeeds = []stageCall{
	{[]string{"prctl"}, "become the command's subreaper, so that nothing it leaves behind escapes the end of the command", required},
	{[]string{"fcntl"}, "make the status pipe close-on-exec", required},
	{[]string{"chdir"}, "change to the command's working directory", required},
	{[]string{"close"}, "close hutch's descriptors before the command runs", required},
	{[]string{"close_range"}, "close hutch's descriptors before the command runs; close is the fallback", fallback},
	{[]string{"prlimit64"}, "set the resource limits", required},
	{[]string{"rt_sigprocmask"}, "block the signals the command's reaper waits for", required},
	{[]string{"vfork", "clone"}, "start the command", required},
	{[]string{"setpgid"}, "give the command a process group of its own; without, signals go to the command alone", fallback},
	{[]string{"setsid"}, "give a command on a terminal a session of its own; without, it has no controlling terminal", fallback},
	{[]string{"ioctl"}, "make a command's terminal its controlling terminal; without, ^C on the terminal does not reach it", fallback},
	{[]string{"execve"}, "run the command", required},
	{[]string{"write"}, "report why the command could not start, and its end", required},
	{[]string{"exit_group"}, "end the stage and the reaper", required},
	{[]string{"openat"}, "scan /proc for what the command left behind", required},
	{[]string{"dup2", "dup3"}, "point the reaper's standard streams at /dev/null", fallback},
	{[]string{"newfstatat", "fstatat64", "fstat"}, "scan /proc for what the command left behind", required},
	{[]string{"getdents64"}, "scan /proc for what the command left behind", required},
	{[]string{"read"}, "scan /proc for what the command left behind", required},
	{[]string{"getpid"}, "find the command's leftovers, exit by its signal", required},
	{[]string{"rt_sigtimedwait"}, "wait for the command's end and for signals to relay", required},
	{[]string{"wait4"}, "reap the command and what it left", required},
	{[]string{"kill"}, "relay signals, kill what the command left behind", required},
	{[]string{"clock_nanosleep"}, "pause between scans of /proc; without, the reaper spins", fallback},
	{[]string{"rt_sigaction"}, "exit by the command's signal", fallback},
}

// verdict is what a filter does with a system call.
type verdict int

const (
	allowed verdict = iota
	refused         // an errno (or a notification answered with one)
	killed          // the thread or process is killed, or trapped
)

// verdictOn evaluates the program on the native syscall name with zero
// arguments (the stage's calls have no argument a profile sensibly
// conditions on). ok is false when the name does not exist here.
func (f *Filter) verdictOn(name string) (v verdict, ok bool) {
	audit, known := nativeAuditArch()
	nr, _, exists := resolveSyscall(name)
	if !known || !exists || nr < 0 {
		return allowed, false
	}
	ret, _, err := evalBPF(f.BPF, seccompData{nr: nr, arch: audit})
	if err != nil {
		return killed, true
	}
	switch ret & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_ALLOW, unix.SECCOMP_RET_LOG:
		return allowed, true
	case unix.SECCOMP_RET_ERRNO, unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_RET_TRACE:
		return refused, true
	}
	return killed, true
}

// checkExecStage refuses a filter under which the exec stage cannot do
// its work (execStageNeeds), naming each call it lacks and why.
func (f *Filter) checkExecStage() error {
	var denied, fatal []string
	for _, c := range execStageNeeds {
		for _, name := range c.names {
			v, ok := f.verdictOn(name)
			if !ok {
				continue // not on this architecture: the next name is
			}
			switch {
			case v == killed && c.need == fallback:
				fatal = append(fatal, fmt.Sprintf("%s (%s)", name, c.why))
			case v != allowed && c.need == required:
				denied = append(denied, fmt.Sprintf("%s (%s)", name, c.why))
			}
			break
		}
	}
	var msgs []string
	if len(denied) > 0 {
		msgs = append(msgs, "allow these: "+strings.Join(denied, ", "))
	}
	if len(fatal) > 0 {
		msgs = append(msgs, "it kills the process on: "+strings.Join(fatal, ", ")+"; deny those with SCMP_ACT_ERRNO instead, or allow them")
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New("the profile does not allow what hutch's exec stage calls after loading the filter (nsjail/execstage.c); " + strings.Join(msgs, "; "))
}
