package session

import "testing"

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "dev", "s-1a2b", "My.Session_2", "0abc", string(make([]byte, 0)) + "x"} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	long := ""
	for i := 0; i < 65; i++ {
		long += "a"
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "a/b", "a b", "../x", long, "é"} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
	if ValidName(long[:64]) != nil {
		t.Error("64 characters must be accepted")
	}
}

// The server refuses an exec request it cannot honour instead of quietly
// running the command under the policy's timeout.
func TestCheckExecRequest(t *testing.T) {
	for _, ok := range []Request{{Argv: []string{"true"}}, {Argv: []string{"true"}, TimeoutMS: 1}} {
		if err := checkExec(&ok); err != nil {
			t.Errorf("checkExec(%+v) = %v", ok, err)
		}
	}
	for req, want := range map[*Request]string{
		{Argv: []string{"true"}, TimeoutMS: -1}:    "exec request: timeout_ms -1: want a whole number of milliseconds, at least 1, or 0 for the policy's timeout",
		{Argv: []string{"true"}, TimeoutMS: -1000}: "exec request: timeout_ms -1000: want a whole number of milliseconds, at least 1, or 0 for the policy's timeout",
		{}: "exec request: argv is empty: name the command to run",
	} {
		if err := checkExec(req); err == nil || err.Error() != want {
			t.Errorf("checkExec(%+v) = %v; want %s", *req, err, want)
		}
	}
}
