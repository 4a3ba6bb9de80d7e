package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// hutch image build takes --no-cache, and its usage error names it; a
// spec that cannot be read is exit 2 with the flag given (parsed, not
// refused as undefined).
func TestImageBuildNoCacheFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "build", "--no-cache"}, "hutch: usage: hutch image build -f FILE [--tag NAME] [--locked] [--no-cache]"},
		{[]string{"image", "build", "--locked", "--no-cache", "-f", missing}, "hutch: image build: read the spec: open " + missing},
	} {
		err := newApp().RunContext(context.Background(), append([]string{"hutch"}, tc.args...))
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != imageExitUsage || !strings.HasPrefix(ee.msg, tc.want) {
			t.Errorf("hutch %q: %v; want exit %d with\n%s", tc.args, err, imageExitUsage, tc.want)
		}
	}
}
