package broker

import (
	"context"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// handleAdminReadQueue serves Sluice's READ_QUEUE (request code 7001,
// wire.ReadQueue): it reads stored messages of any queue for an admin tool — in
// particular %DLQ%<group>, which is write-only so that normal consumers' pulls are
// refused (NO_PERMISSION). There is no group, subscription or permission check, no long
// polling and no offset commit. Request ext: topic, queueId, offset, maxMsgNums (at most
// 32, like a pull). The answer is a PULL_MESSAGE response (codes 0/19/20/21 and the four
// offset ext fields; docs/protocol.md §3.4).
func (b *Broker) handleAdminReadQueue(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseReadQueueHeader(req)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	n := h.MaxMsgNums
	if n <= 0 || n > maxPullMessages {
		n = maxPullMessages
	}
	res, err := b.store.GetMessage(h.Topic, h.QueueID, h.Offset, int(n), maxPullBytes, nil)
	if err != nil {
		return errResponse(remoting.SystemError, "get message: %v", err)
	}
	return pullResponse(h.Offset, res)
}
