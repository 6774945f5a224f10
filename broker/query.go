package broker

import (
	"context"
	"errors"
	"strconv"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/remoting"
)

// uniqueKeyQueryFlag is the QUERY_MESSAGE ext field that asks for a UNIQ_KEY lookup
// (RocketMQ MixAll.UNIQUE_MSG_QUERY_FLAG).
const uniqueKeyQueryFlag = "_UNIQUE_KEY_QUERY"

// handleQueryMessage serves QUERY_MESSAGE (RocketMQ request code 12, docs/protocol.md §3.12): ext
// topic, key, maxNum, beginTimestamp and endTimestamp (ms); with _UNIQUE_KEY_QUERY=true the
// key is a UNIQ_KEY and maxNum is 32. It answers SUCCESS with the matching records back to
// back as the body, or QUERY_NOT_FOUND (22) "can not find message, maybe time range not
// correct"; both carry ext indexLastUpdateTimestamp and indexLastUpdatePhyoffset. A
// missing or malformed field gets SYSTEM_ERROR naming it.
func (b *Broker) handleQueryMessage(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	q := store.IndexQuery{}
	var err error
	if q.Topic, err = req.ExtString("topic", true); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if q.Key, err = req.ExtString("key", true); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	maxNum, err := req.ExtInt32("maxNum", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	q.MaxNum = int(maxNum)
	if q.BeginTimestamp, err = req.ExtInt64("beginTimestamp", true); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if q.EndTimestamp, err = req.ExtInt64("endTimestamp", true); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if q.UniqKey, err = req.ExtBool(uniqueKeyQueryFlag); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if q.UniqKey {
		q.MaxNum = store.DefaultQueryMaxNum
	}
	res, err := b.store.Query(q)
	var ia *store.InvalidArgumentError
	switch {
	case errors.As(err, &ia):
		return errResponse(remoting.SystemError, "query message: %v", err)
	case errors.Is(err, store.ErrIndexDisabled):
		return errResponse(remoting.SystemError, "query message: the message index is disabled on this broker")
	case err != nil:
		b.log.Error("query message", "topic", q.Topic, "key", q.Key, "err", err)
		return errResponse(remoting.SystemError, "query message: %v", err)
	}
	var r *remoting.RemotingCommand
	if len(res.Records) == 0 {
		r = remoting.NewResponse(remoting.QueryNotFound, "can not find message, maybe time range not correct")
	} else {
		r = okResponse()
		size := 0
		for _, rec := range res.Records {
			size += len(rec)
		}
		r.Body = make([]byte, 0, size)
		for _, rec := range res.Records {
			r.Body = append(r.Body, rec...)
		}
	}
	r.SetExt("indexLastUpdateTimestamp", strconv.FormatInt(res.IndexLastUpdateTimestamp, 10))
	r.SetExt("indexLastUpdatePhyoffset", strconv.FormatInt(res.IndexLastUpdatePhyOffset, 10))
	return r
}

// handleViewMessage serves VIEW_MESSAGE_BY_ID (33): ext "offset" is a commitlog offset;
// the body is the raw record.
func (b *Broker) handleViewMessage(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	off, err := req.ExtInt64("offset", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	m, raw, err := b.store.LookMessageByOffset(off)
	if err != nil {
		return errResponse(remoting.SystemError, "can not find message by the offset, %d", off)
	}
	if resp := b.checkStoredRead(conn, req, m.Topic); resp != nil {
		return resp
	}
	r := okResponse()
	r.Body = raw
	return r
}
