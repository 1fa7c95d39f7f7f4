package delay

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Errors of Cron.Add and Cron.Run.
var (
	// ErrInvalidSpec is in the chain of every *SpecError.
	ErrInvalidSpec = errors.New("delay: invalid cron spec")
	// ErrInvalidEntry is in the chain of every *EntryError.
	ErrInvalidEntry = errors.New("delay: invalid cron entry")
	// ErrEntryExists: Add was given a name the Cron already has.
	ErrEntryExists = errors.New("delay: cron entry exists")
	// ErrCronRunning: Run was called while the Cron was running.
	ErrCronRunning = errors.New("delay: cron is already running")
)

// SpecError reports a spec Add could not use: robfig/cron refused it (or
// panicked on it), an @every is not a whole number of seconds, or the spec
// matches no time within five years. errors.Is(err, ErrInvalidSpec) holds.
type SpecError struct {
	Name string // the entry's name
	Spec string // the spec as given
	Err  error  // why
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("delay: cron %q: invalid spec %q: %v", e.Name, e.Spec, e.Err)
}

// Unwrap returns ErrInvalidSpec and the cause.
func (e *SpecError) Unwrap() []error { return []error{ErrInvalidSpec, e.Err} }

// EntryError reports a field of a CronEntry, other than its spec, that Add
// refused. errors.Is(err, ErrInvalidEntry) holds.
type EntryError struct {
	Name   string // the entry's name
	Field  string // "Name", "Kind", "Queue", "Args", ...
	Reason string
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("delay: cron %q: %s: %s", e.Name, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidEntry.
func (e *EntryError) Is(target error) bool { return target == ErrInvalidEntry }

// errNoFire: the schedule has no fire within five years of the time asked
// (robfig/cron's search limit).
var errNoFire = errors.New("no fire within five years")

// schedule computes fire times. robfig/cron does the calendar arithmetic;
// @every is computed here instead, aligned on the Unix epoch, because
// robfig's counts from whenever it is asked, and instances started at
// different moments would then disagree on the fire times.
type schedule struct {
	spec  cron.Schedule
	every time.Duration  // > 0 for @every
	loc   *time.Location // the zone fire times are computed and shown in
}

// parseSpec parses spec with robfig/cron (seconds optional, descriptors,
// CRON_TZ= or TZ= prefix), turning its panics into errors. loc is the zone of
// a spec without a prefix.
func parseSpec(spec string, loc *time.Location) (s *schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("robfig/cron panicked: %v", r)
		}
	}()
	spec = strings.TrimSpace(spec)
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	parsed, err := p.Parse(spec)
	if err != nil {
		return nil, err
	}
	switch v := parsed.(type) {
	case *cron.SpecSchedule:
		s = &schedule{spec: v, loc: loc}
		if v.Location != time.Local { // a CRON_TZ= or TZ= prefix
			s.loc = v.Location
		}
	case cron.ConstantDelaySchedule:
		// robfig rounds "@every -5s" up to 1s and drops fractions; refuse
		// both instead of firing at a period nobody wrote.
		_, text, _ := strings.Cut(spec, "@every ")
		d, err := time.ParseDuration(strings.TrimSpace(text))
		if err != nil {
			return nil, err
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("@every %v: want a whole number of seconds, at least 1s", d)
		}
		s = &schedule{spec: v, every: d, loc: loc}
	default:
		return nil, fmt.Errorf("unexpected schedule type %T", parsed)
	}
	return s, nil
}

// next returns the first fire after t. robfig's panics are errors.
func (s *schedule) next(t time.Time) (n time.Time, err error) {
	if s.every > 0 {
		sec := int64(s.every / time.Second)
		return time.Unix((t.Unix()/sec+1)*sec, 0).In(s.loc), nil
	}
	defer func() {
		if r := recover(); r != nil {
			n, err = time.Time{}, fmt.Errorf("robfig/cron panicked: %v", r)
		}
	}()
	n = s.spec.Next(t.In(s.loc))
	if n.IsZero() {
		return n, errNoFire
	}
	return n.In(s.loc), nil
}

// latest returns the last fire at or before now, given that the first fire
// after after is at or before now. It bisects on "a fire lies in (t, now]",
// which holds at after and fails at now, down to one second (fires are whole
// seconds), so a long outage costs about log2(seconds) calls of next rather
// than one per missed fire.
func (s *schedule) latest(after, now time.Time) (time.Time, error) {
	lo, hi := after, now
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		n, err := s.next(mid)
		switch {
		case errors.Is(err, errNoFire):
			hi = mid // none for five years: none before now either
		case err != nil:
			return time.Time{}, err
		case n.After(now):
			hi = mid
		default:
			lo = mid
		}
	}
	return s.next(lo)
}
