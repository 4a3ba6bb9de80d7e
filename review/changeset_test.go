package review

import (
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "run-20261202-abc.1_x": true, "0abc": true, strings.Repeat("a", 64): true,
		"": false, strings.Repeat("a", 65): false, ".x": false, "-x": false, "_x": false,
		"a/b": false, "a b": false, "..": false, "é": false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}
