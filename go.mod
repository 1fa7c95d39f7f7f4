module github.com/conveyorq/conveyor

go 1.25

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/hashicorp/go-multierror v1.1.1
	github.com/redis/go-redis/v9 v9.22.0
	github.com/robfig/cron/v3 v3.0.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/hashicorp/errwrap v1.0.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
)
