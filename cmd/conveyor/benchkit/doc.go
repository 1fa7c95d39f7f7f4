// Package benchkit measures job systems on Redis: the workloads behind
// `conveyor bench` (cmd/conveyor) and the side-by-side comparison with
// asynq (bench/compare, a module of its own).
//
// A workload drives a Target, the system under measurement, through the
// same code whichever system it is: Conveyor's list and stream drivers
// here, asynq in bench/compare. The timing, the percentile math and the
// Redis memory reading are therefore identical on both sides of a ratio.
// The package is exported (not internal) so that the comparison module,
// which cannot import another module's internal packages, can reuse it.
//
//	env, err := benchkit.NewEnv(ctx, opts, &benchkit.Config{N: 10_000})
//	defer env.Close(ctx)
//	res, err := benchkit.Run(ctx, env, "e2e", benchkit.Conveyor("list"))
//	benchkit.WriteTable(os.Stdout, []benchkit.Result{res})
package benchkit
