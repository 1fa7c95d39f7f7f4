package conveyortest

import (
	"testing"
	"time"
)

func TestClockAdvance(t *testing.T) {
	t.Parallel()
	c := NewClock(time.Time{})
	if got := c.Now(); !got.Equal(DefaultStart) {
		t.Fatalf("a clock from the zero time stands at %v, want %v", got, DefaultStart)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), DefaultStart.Add(90*time.Second); !got.Equal(want) {
		t.Fatalf("after Advance(90s): %v, want %v", got, want)
	}
	start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	if got := NewClock(start).Now(); !got.Equal(start) {
		t.Fatalf("NewClock(%v).Now() = %v", start, got)
	}
}

func TestClockRefusesToGoBack(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"negative": func() { NewClock(time.Time{}).Advance(-time.Second) },
		"system":   func() { (*Clock)(nil).Advance(time.Second) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Error("Advance did not panic")
				}
			}()
			f()
		})
	}
}

func TestNilClockIsSystemClock(t *testing.T) {
	t.Parallel()
	before := time.Now()
	got := (*Clock)(nil).Now()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("nil clock's Now %v is not the system's time (after %v)", got, before)
	}
}
