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
