package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// PartialError is returned together with a result that lacks the answers of some
// brokers: the others answered and their part is in the result. Failed holds one error
// per failing broker, naming it as a rule (a refusal is a *remoting.ResponseError). When no broker answers,
// calls return the joined errors instead, never an empty result with a PartialError.
type PartialError struct {
	Answered int     // brokers that answered
	Failed   []error // one per broker that did not
}

// Error implements error: how many brokers failed, and each failure.
func (e *PartialError) Error() string {
	msgs := make([]string, len(e.Failed))
	for i, err := range e.Failed {
		msgs[i] = strings.TrimPrefix(err.Error(), "admin: ")
	}
	return fmt.Sprintf("admin: incomplete result: %d of %d broker(s) failed: %s", len(e.Failed), e.Answered+len(e.Failed), strings.Join(msgs, "; "))
}

// Unwrap returns the brokers' errors.
func (e *PartialError) Unwrap() []error { return e.Failed }

// FailedBrokers returns "name (addr)" (or the address) of each failing broker that is
// known, in order.
func (e *PartialError) FailedBrokers() []string {
	var out []string
	for _, err := range e.Failed {
		var name, addr string
		var bf *brokerFailure
		var re *remoting.ResponseError
		switch {
		case errors.As(err, &bf):
			name, addr = bf.name, bf.addr
		case errors.As(err, &re):
			name, addr = re.Broker, re.Addr
		default:
			continue
		}
		if name == "" {
			out = append(out, addr)
		} else {
			out = append(out, name+" ("+addr+")")
		}
	}
	return out
}

func isPartial(err error) bool {
	var pe *PartialError
	return errors.As(err, &pe)
}

// partial returns nil when errs is empty, the joined errs when no broker answered, and a
// [*PartialError] otherwise.
func partial(answered int, errs []error) error {
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	switch {
	case len(failed) == 0:
		return nil
	case answered == 0:
		return errors.Join(failed...)
	}
	return &PartialError{Answered: answered, Failed: failed}
}

// BrokerProbe is one registered broker address and whether it answered ([Admin.ProbeBrokers]).
type BrokerProbe struct {
	Cluster string `json:"cluster"`
	Name    string `json:"broker"`
	ID      int64  `json:"brokerId"` // 0 master, ≥ 1 slave
	Addr    string `json:"addr"`
	Err     error  `json:"-"` // nil: it answered
}

// ProbeBrokers asks every broker address the name server knows (masters and slaves) for
// the max offset of TBW102's queue 0 (GET_MAX_OFFSET, RocketMQ request code 30: cheap,
// no side effect); any answer, even a refusal, counts as reachable. A name server keeps a stopped broker's registration until it expires, so
// its listing alone does not say a broker is up. The probes run in parallel, each bounded
// by Config.Timeout. Errors: cluster-info errors, [ErrNoBroker] when none is registered;
// a failing probe is in its BrokerProbe.Err (naming the broker) and, when some answered,
// in a [*PartialError] returned with the list (the joined errors when none did).
func (a *Admin) ProbeBrokers(ctx context.Context) ([]BrokerProbe, error) {
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	var out []BrokerProbe
	for cluster, names := range ci.ClusterAddrTable {
		for _, n := range names {
			bd := ci.BrokerAddrTable[n]
			if bd == nil {
				continue
			}
			for id, addr := range bd.BrokerAddrs {
				out = append(out, BrokerProbe{Cluster: cluster, Name: n, ID: id, Addr: addr})
			}
		}
	}
	if len(out) == 0 {
		return nil, a.noBrokerError()
	}
	sortProbes(out)
	done := make(chan struct{}, len(out))
	for i := range out {
		go func() {
			defer func() { done <- struct{}{} }()
			p := &out[i]
			ext := map[string]string{"topic": message.AutoCreateTopicKey, "queueId": "0"}
			resp, err := a.invoke(ctx, p.Name, p.Addr, remoting.GetMaxOffset, ext, nil)
			if err == nil && resp == nil {
				err = brokerFailed(p.Name, p.Addr, errors.New("no answer"))
			}
			p.Err = err
		}()
	}
	for range out {
		<-done
	}
	answered := 0
	var errs []error
	for _, p := range out {
		if p.Err == nil {
			answered++
		} else {
			errs = append(errs, p.Err)
		}
	}
	return out, partial(answered, errs)
}

func sortProbes(ps []BrokerProbe) {
	less := func(x, y BrokerProbe) bool {
		if x.Cluster != y.Cluster {
			return x.Cluster < y.Cluster
		}
		if x.Name != y.Name {
			return x.Name < y.Name
		}
		return x.ID < y.ID
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && less(ps[j], ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}
