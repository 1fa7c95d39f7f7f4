package conveyortest

import "github.com/conveyorq/conveyor"

// NewClient returns a conveyor.Client that enqueues to d on d's clock
// (ClientConfig.Now, unless cfg sets it), so that a Delay counts from the
// fake clock's time and comes due when the test advances it past.
func NewClient(d *Driver, cfg *conveyor.ClientConfig) (*conveyor.Client, error) {
	var c conveyor.ClientConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	return conveyor.NewClient(d, &c)
}
