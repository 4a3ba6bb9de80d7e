package nsjail

import (
	"strings"
	"testing"
)

func TestCheckArgs(t *testing.T) {
	big := strings.Repeat("a", 100<<10)
	eight := uint64(8 << 20)
	for _, c := range []struct {
		argv, env []string
		stack     uint64
		want      string
	}{
		{[]string{"echo", "hi"}, []string{"A=1"}, eight, ""},
		{[]string{"echo", big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big}, nil, eight, ""},
		{append([]string{"echo"}, strings.Split(strings.Repeat(big+" ", 21), " ")...), nil, eight, "ARG_MAX"},
		{append([]string{"echo"}, strings.Split(strings.Repeat(big+" ", 21), " ")...), nil, 64 << 20, ""},
		{[]string{"echo", strings.Repeat("x", 1<<17)}, nil, eight, "argument 1 of the command is 131072 bytes"},
		{[]string{"true"}, []string{"HUGE=" + strings.Repeat("x", 1<<17)}, eight, "environment variable HUGE"},
		{[]string{"echo", big, big}, nil, 256 << 10, "at most 131072 here"},
	} {
		err := checkArgs(c.argv, c.env, c.stack)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%d args, stack %d: %v, want %q", len(c.argv), c.stack, err, c.want)
		}
	}
}
