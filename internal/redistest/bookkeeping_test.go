package redistest

import "testing"

func TestBookkeeping(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"p:queues":            true,
		"p:{q}:stats":         true,
		"p:{a:b}:stats":       true,
		"p:{q}:reclaimed":     true,
		"p:{q}:lease":         false,
		"p:{q}:ready":         false,
		"p:{q}:stats:x":       false,
		"p:{q}:x}:stats":      false, // not a queue's key: braces cannot be in a name
		"px:queues":           false,
		"p:queues:x":          false,
		"other:{q}:stats":     false,
		"p:{q}x}:reclaimed":   false,
		"p:{workers}:index":   true,
		"p:{workers}:w:h-1-a": true,
		"p:{workers}:w:":      false,
		"p:{workers}:other":   false,
	} {
		if got := Bookkeeping("p", key); got != want {
			t.Errorf("Bookkeeping(p, %q) = %v, want %v", key, got, want)
		}
	}
}
