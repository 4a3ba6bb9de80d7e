package seccompprofiles

import (
	_ "embed"
	"sync"
)

// defaultJSON is hutch's built-in profile, in the Docker format; the file
// is documented group by group in docs/SECCOMP.md.
//
//go:embed default.json
var defaultJSON []byte

// DefaultSource is the Source of the built-in profile.
const DefaultSource = "default"

var defaultProfile = sync.OnceValues(func() (*Profile, error) {
	return Parse(defaultJSON, DefaultSource)
})

// Default returns hutch's built-in allowlist profile: unknown syscalls fail
// with ENOSYS, the dangerous ones listed in it with EPERM. Each call returns
// a fresh copy.
func Default() *Profile {
	p, err := defaultProfile()
	if err != nil {
		panic("seccompprofiles: the embedded default profile is invalid: " + err.Error())
	}
	return p.Clone()
}

// DefaultJSON returns the built-in profile's JSON, e.g. as a starting point
// for a custom profile.
func DefaultJSON() []byte { return append([]byte(nil), defaultJSON...) }
