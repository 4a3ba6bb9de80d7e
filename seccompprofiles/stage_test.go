package seccompprofiles

import (
	"strconv"
	"strings"
	"testing"
)

// stageProfile is a profile that allows exactly names (and denies the rest
// with EPERM, or kills with kill).
func stageProfile(t *testing.T, names []string, rest string) *Profile {
	t.Helper()
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
	}
	p, err := Parse([]byte(`{"defaultAction": "`+rest+`", "syscalls": [{"names": [`+strings.Join(q, ", ")+`], "action": "SCMP_ACT_ALLOW"}]}`), "stage.json")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A profile that denies what hutch's exec stage calls once the filter is
// loaded is refused: under it the stage could not start the command, nor
// even say why (exit 125 without a word, even with --debug).
func TestCompileRefusesWhatTheExecStageCannotRunUnder(t *testing.T) {
	_, err := Compile(stageProfile(t, []string{"exit_group"}, ActErrno), Options{Notify: true})
	want := "the profile does not allow what hutch's exec stage calls after loading the filter (nsjail/execstage.c); allow these: " +
		"prctl (become the command's subreaper, so that nothing it leaves behind escapes the end of the command), " +
		"fcntl (make the status pipe close-on-exec), " +
		"chdir (change to the command's working directory), " +
		"close (close hutch's descriptors before the command runs), " +
		"prlimit64 (set the resource limits), " +
		"rt_sigprocmask (block the signals the command's reaper waits for), " +
		"vfork (start the command), " +
		"execve (run the command), " +
		"write (report why the command could not start, and its end), " +
		"openat (scan /proc for what the command left behind), " +
		"newfstatat (scan /proc for what the command left behind), " +
		"getdents64 (scan /proc for what the command left behind), " +
		"read (scan /proc for what the command left behind), " +
		"getpid (find the command's leftovers, exit by its signal), " +
		"rt_sigtimedwait (wait for the command's end and for signals to relay), " +
		"wait4 (reap the command and what it left), " +
		"kill (relay signals, kill what the command left behind)"
	if err == nil || err.Error() != want {
		t.Errorf("Compile(exit_group only) error:\n%v\nwant:\n%s", err, want)
	}

	// What the stage can do without (it falls back) may be denied with an
	// errno, but not kill the process.
	var all []string
	for _, n := range execStageNeeds {
		all = append(all, n.names[0])
	}
	var needed []string
	for _, n := range execStageNeeds {
		if n.need == required {
			needed = append(needed, n.names[0])
		}
	}
	if _, err := Compile(stageProfile(t, needed, ActErrno), Options{}); err != nil {
		t.Errorf("Compile(what the stage needs, errno for the rest): %v", err)
	}
	_, err = Compile(stageProfile(t, needed, ActKillProcess), Options{})
	if err == nil || !strings.Contains(err.Error(), "kills the process on: close_range (close hutch's descriptors before the command runs; close is the fallback)") {
		t.Errorf("Compile(what the stage needs, kill for the rest) error = %v; want the fallbacks named", err)
	}
	if _, err := Compile(stageProfile(t, all, ActKillProcess), Options{}); err != nil {
		t.Errorf("Compile(every stage call, kill for the rest): %v", err)
	}
}

// Unknown syscall names are skipped with a warning the compiled filter
// carries (so the caller can say it once per profile); strict enforcement
// refuses them.
func TestCompileUnknownNames(t *testing.T) {
	var all []string
	for _, n := range execStageNeeds {
		all = append(all, n.names[0])
	}
	p := stageProfile(t, append(all, "hutch_no_such_syscall"), ActErrno)
	f, err := Compile(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `$.syscalls[0].names[` + strconv.Itoa(len(all)) + `]: unknown syscall "hutch_no_such_syscall" skipped`
	if strings.Join(f.Unknown, "\n") != want || !strings.Contains(strings.Join(f.Warnings, "\n"), want) {
		t.Errorf("Unknown = %q, Warnings = %q; want both to hold %s", f.Unknown, f.Warnings, want)
	}
	_, err = Compile(p, Options{Strict: true})
	if wantErr := want[:len(want)-len(" skipped")] + `: strict enforcement refuses what it cannot apply: remove the name, or set enforcement = "best-effort"`; err == nil || err.Error() != wantErr {
		t.Errorf("Compile(Strict) error = %v; want %s", err, wantErr)
	}
}
