package policy

import (
	"fmt"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
	}{
		{"0", 0},
		{"1048576", MiB},
		{"1500", 1500},
		{"512B", 512},
		{"1K", KiB},
		{"1KiB", KiB},
		{"1KB", 1000},
		{"64M", 64 * MiB},
		{"512MiB", 512 * MiB},
		{"512mib", 512 * MiB},
		{"2 GiB", 2 * GiB},
		{"1.5GiB", 3 * GiB / 2},
		{"0.5K", 512},
		{"1.1KiB", 1126}, // 1126.4, rounded down
		{"3MB", 3000000},
		{"2G", 2 * GiB},
		{"1GB", 1000000000},
		{"1T", TiB},
		{"1TiB", TiB},
		{"1TB", 1000000000000},
		{" 8 MiB ", 8 * MiB},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"12XB", `bad size "12XB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"", `bad size "": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"MiB", `bad size "MiB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"-1MiB", `bad size "-1MiB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"1.2.3M", `bad size "1.2.3M": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"1e6", `bad size "1e6": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`},
		{"1.5", `bad size "1.5": a byte count must be a whole number`},
		{"1.5B", `bad size "1.5B": a byte count must be a whole number`},
		{"9999999TiB", `bad size "9999999TiB": too large`},
		{"99999999999999999999", `bad size "99999999999999999999": too large`},
		{"99999999999.5TiB", `bad size "99999999999.5TiB": too large`},
	} {
		_, err := ParseSize(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseSize(%q) error = %v; want %s", tc.in, err, tc.want)
		}
	}
}

func TestSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   Size
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1500, "1500B"},
		{KiB, "1KiB"},
		{1536, "1536B"}, // 1.5KiB is not exact in KiB
		{512 * MiB, "512MiB"},
		{1536 * MiB, "1536MiB"},
		{2 * GiB, "2GiB"},
		{3 * TiB, "3TiB"},
		{2048 * TiB, "2048TiB"},
		{MiB + 1, "1048577B"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("Size(%d).String() = %q; want %q", int64(tc.in), got, tc.want)
		}
		back, err := ParseSize(tc.in.String())
		if err != nil || back != tc.in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in.String(), back, err, int64(tc.in))
		}
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		str  string
	}{
		{"30s", 30 * time.Second, "30s"},
		{"10m", 10 * time.Minute, "10m"},
		{"10m0s", 10 * time.Minute, "10m"},
		{"1h30m", 90 * time.Minute, "1h30m"},
		{"1h", time.Hour, "1h"},
		{"8h", 8 * time.Hour, "8h"},
		{"1.5h", 90 * time.Minute, "1h30m"},
		{"1h0m5s", time.Hour + 5*time.Second, "1h0m5s"},
		{"1.5s", 1500 * time.Millisecond, "1.5s"},
		{"500ms", 500 * time.Millisecond, "500ms"},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got.D() != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got.D(), err, tc.want)
			continue
		}
		if s := got.String(); s != tc.str {
			t.Errorf("Duration(%v).String() = %q; want %q", tc.want, s, tc.str)
		}
	}
	const syntax = "want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)"
	const overflow = "too large: durations go up to 2562047h (about 292 years)"
	for in, why := range map[string]string{
		"10 minutes": syntax, "10": syntax, "h": syntax, "1..5s": syntax, "1x": syntax, "": syntax,
		"9999999999h": overflow, "2562048h": overflow, "1h9223372036854775807ns": overflow,
	} {
		_, err := ParseDuration(in)
		if want := fmt.Sprintf("bad duration %q: %s", in, why); err == nil || err.Error() != want {
			t.Errorf("ParseDuration(%q) error = %v; want %s", in, err, want)
		}
	}
}
