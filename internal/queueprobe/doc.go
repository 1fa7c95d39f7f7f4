// Package queueprobe reads the queues of the two durable drivers (list,
// stream) on one Redis and key prefix: it holds both drivers with their
// Inspectors, tells each queue's driver from its keys, and reads every
// queue's figures through the right one. The CLI and the dashboard read
// queues through it.
//
//	s, err := queueprobe.New(rdb, &queueprobe.Config{Prefix: "conveyor"})
//	qs, err := s.Overview(ctx) // every queue: driver, paused, figures
package queueprobe
