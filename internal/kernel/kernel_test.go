package kernel

import "testing"

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [3]int
	}{
		{"6.18.0-1-amd64", [3]int{6, 18, 0}},
		{"6.1.0-28-cloud-amd64", [3]int{6, 1, 0}},
		{"5.15", [3]int{5, 15, 0}},
		{"4.19.325", [3]int{4, 19, 325}},
		{"unknown", [3]int{}},
		{"", [3]int{}},
	} {
		if got := ParseVersion(c.in); got != c.want {
			t.Errorf("ParseVersion(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCompare(t *testing.T) {
	if Compare([3]int{6, 1, 0}, [3]int{5, 12, 0}) != 1 || Compare([3]int{5, 12, 0}, [3]int{6, 1, 0}) != -1 ||
		Compare([3]int{6, 3, 1}, [3]int{6, 3, 1}) != 0 || Compare([3]int{6, 3, 0}, [3]int{6, 3, 1}) != -1 {
		t.Fatal("Compare orders versions wrongly")
	}
	if !AtLeast("2.6") || AtLeast("999.0") {
		t.Fatalf("AtLeast disagrees with the running kernel %s", Release())
	}
}
