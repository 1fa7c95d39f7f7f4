package main

import "testing"

func TestPerMin(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0: "0.0", 0.04: "0.0", 2.0 / 3: "0.7", 5: "5.0", 99.94: "99.9",
		// From 100 on, whole numbers; 99.96 rounds to 100.0, so to 100.
		99.96: "100", 100: "100", 600: "600", 1234.5: "1235",
	} {
		if got := perMin(v); got != want {
			t.Errorf("perMin(%v) = %q, want %q", v, got, want)
		}
	}
}
