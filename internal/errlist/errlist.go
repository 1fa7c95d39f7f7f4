// Package errlist splits an error that joins others (errors.Join or
// go-multierror) into the errors it joins, so that a caller can look at
// each one: which delivery or queue a batch's error names.
//
//	for _, e := range errlist.Split(err) { ... }
package errlist

// Split returns the errors err joins (errors.Join's Unwrap() []error, or
// go-multierror's WrappedErrors), or err alone.
func Split(err error) []error {
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		return m.Unwrap()
	}
	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		return m.WrappedErrors()
	}
	return []error{err}
}
