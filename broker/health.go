package broker

import (
	"errors"
	"fmt"
)

// Ready reports whether the broker can take traffic, for a readiness probe (the metrics
// listener's /readyz): nil once it is started, has registered with a name server at
// least once (clients can find it) and accepts sends; otherwise an error saying why
// (not started, shut down, never registered — with the failures —, or refusing sends
// because the disk is full).
func (b *Broker) Ready() error {
	switch {
	case !b.started.Load():
		return errors.New("broker not started")
	case b.stopped.Load():
		return errors.New("broker shut down")
	}
	st := b.Stats()
	if st.RegisterOK == 0 {
		return fmt.Errorf("broker not registered with any name server yet (%d registration(s) failed)", st.RegisterFailed)
	}
	if st.RefusingWrites {
		return errors.New("broker refuses sends: the disk is full (diskPressurePolicy=refuseWrites)")
	}
	return nil
}

// MetricsPerQueueLag reports Config.MetricsPerQueueLag (for package brokermetrics).
func (b *Broker) MetricsPerQueueLag() bool { return b.cfg.MetricsPerQueueLag }
