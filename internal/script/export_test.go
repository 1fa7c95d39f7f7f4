package script

import "time"

// SetBusClock makes b read the time from now.
func SetBusClock(b *Bus, now func() time.Time) { b.now = now }

// BusWaiting returns the number of commands waiting on b for a ride.
func BusWaiting(b *Bus) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiting)
}

// NoFunctions is noFunctions.
var NoFunctions = noFunctions
