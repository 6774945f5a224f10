package consumer

import (
	"sort"

	"github.com/sluicemq/sluice/message"
)

// AllocateStrategy decides which message queues of a topic a consumer takes in clustering
// mode. It gets this consumer's client id, all queues of the topic and the client ids of
// all consumers of the group, and returns this consumer's share. It must be
// deterministic: every member computes the allocation on its own and the shares must not
// overlap. Inputs must not be modified.
type AllocateStrategy func(clientID string, mqAll []message.MessageQueue, cidAll []string) []message.MessageQueue

// AllocateByAveragely is RocketMQ's default strategy (Java AllocateMessageQueueAveragely;
// docs/protocol.md §7.3): queues sorted by (topic, broker name, queue id) and client ids sorted
// as strings are split into consecutive ranges; the first mqs % cids consumers get one
// queue more. A consumer whose id is not in cidAll gets nothing, as does every consumer
// beyond the number of queues.
func AllocateByAveragely(clientID string, mqAll []message.MessageQueue, cidAll []string) []message.MessageQueue {
	if clientID == "" || len(mqAll) == 0 || len(cidAll) == 0 {
		return nil
	}
	mqs := append([]message.MessageQueue(nil), mqAll...)
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].Less(mqs[j]) })
	cids := append([]string(nil), cidAll...)
	sort.Strings(cids)
	idx := -1
	for i, c := range cids {
		if c == clientID {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	n, m := len(mqs), len(cids)
	mod := n % m
	var avg int
	switch {
	case n <= m:
		avg = 1
	case mod > 0 && idx < mod:
		avg = n/m + 1
	default:
		avg = n / m
	}
	start := idx*avg + mod
	if mod > 0 && idx < mod {
		start = idx * avg
	}
	count := min(avg, n-start)
	if count <= 0 {
		return nil
	}
	return mqs[start : start+count]
}
