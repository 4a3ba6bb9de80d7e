package policy

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// TiB is 1024 GiB.
const TiB Size = 1 << 40

// sizeUnits maps a unit, lower-cased, to its factor. "K", "M", "G" and "T"
// are binary (KiB...), "KB", "MB", "GB" and "TB" decimal.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"k":   1 << 10,
	"kib": 1 << 10,
	"kb":  1e3,
	"m":   1 << 20,
	"mib": 1 << 20,
	"mb":  1e6,
	"g":   1 << 30,
	"gib": 1 << 30,
	"gb":  1e9,
	"t":   1 << 40,
	"tib": 1 << 40,
	"tb":  1e12,
}

const sizeWant = "want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)"

// ParseSize reads a size: a whole number of bytes ("1048576"), or a number
// with a unit ("512MiB", "1.5GiB", "64M"). Units are B; K or KiB, M or MiB,
// G or GiB, T or TiB (1024-based); KB, MB, GB, TB (1000-based); they are
// case-insensitive and may be separated from the number by spaces. A
// fraction is rounded down to a whole byte. Negative sizes are refused.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	factor, ok := sizeUnits[unit]
	if !ok || num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("bad size %q: %s", s, sizeWant)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/factor {
			return 0, fmt.Errorf("bad size %q: too large", s)
		}
		return Size(n * factor), nil
	}
	if factor == 1 {
		return 0, fmt.Errorf("bad size %q: a byte count must be a whole number", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("bad size %q: %s", s, sizeWant)
	}
	r.Mul(r, new(big.Rat).SetInt64(factor))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return Size(n.Int64()), nil
}

// String prints s in the largest binary unit that holds it exactly:
// "512MiB", "2GiB", "1500B", "0B".
func (s Size) String() string {
	units := []struct {
		name string
		n    Size
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}
	if s != 0 {
		for _, u := range units {
			if s%u.n == 0 {
				return strconv.FormatInt(int64(s/u.n), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// MarshalText implements encoding.TextMarshaler; it returns String.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSize.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseDuration reads a duration in time.ParseDuration's syntax: "30s",
// "10m", "1h30m", "1.5h", "500ms". It does not check the sign; Validate
// requires durations in a policy to be positive.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	if err != nil {
		if durationSyntax(t) { // it has the form; its value does not fit
			return 0, fmt.Errorf("bad duration %q: too large: durations go up to %dh (about 292 years)", s, math.MaxInt64/int64(time.Hour))
		}
		return 0, fmt.Errorf("bad duration %q: want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)", s)
	}
	return Duration(d), nil
}

// durationSyntax reports whether s has time.ParseDuration's form: an
// optional sign, then numbers (digits, maybe with a fraction), each with a
// unit; or "0".
func durationSyntax(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if s == "0" {
		return true
	}
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	for first := true; first || s != ""; first = false {
		i, digits := 0, 0
		for ; i < len(s) && (digit(s[i]) || s[i] == '.'); i++ {
			if digit(s[i]) {
				digits++
			}
		}
		if digits == 0 || strings.Count(s[:i], ".") > 1 {
			return false
		}
		s = s[i:]
		u := 0
		for u < len(s) && !digit(s[u]) && s[u] != '.' {
			u++
		}
		switch s[:u] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[u:]
	}
	return true
}

// MinTimeout is the shortest timeout hutch takes (--timeout,
// resources.timeout): sessions carry timeouts in whole milliseconds.
const MinTimeout = Duration(time.Millisecond)

// CheckTimeout says what is wrong with d as a timeout: not at least
// MinTimeout. The message says what is valid; callers name the flag or key.
func CheckTimeout(d Duration) error {
	if d < MinTimeout {
		return fmt.Errorf("must be at least %s, e.g. 30s or 10m", MinTimeout)
	}
	return nil
}

// String prints d compactly: "10m" rather than "10m0s", "1h30m", "1h",
// "30s", "1.5s", "500ms".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler; it returns String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
