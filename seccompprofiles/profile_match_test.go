package seccompprofiles

import (
	"regexp"
	"testing"
)

// The hand-written matchers agree with the regexps they replace.
func TestMatchersAgreeWithRegexps(t *testing.T) {
	cases := []struct {
		name string
		re   *regexp.Regexp
		f    func(string) bool
	}{
		{"isIdent", regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`), isIdent},
		{"isSyscallName", regexp.MustCompile(`^[a-z_][a-z0-9_]*$`), isSyscallName},
		{"isKernelVersion", regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`), isKernelVersion},
	}
	inputs := []string{"", "a", "A", "_", "0", "a0", "0a", "read", "Read", "epoll_wait", "x-y", "a b", "é",
		"5", "5.", ".5", "5.10", "5.10.1", "5.10.1.2", "05.010", "5..1", "5.a", "6.18.44", "名前", "a\n"}
	for _, c := range cases {
		for _, in := range inputs {
			if got, want := c.f(in), c.re.MatchString(in); got != want {
				t.Errorf("%s(%q) = %v, the regexp says %v", c.name, in, got, want)
			}
		}
	}
}
