package wire

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits on a compressed RegisterBrokerBody a name server accepts.
const (
	// MaxRegisterBodyInflated bounds the inflated size of a compressed registration, in
	// bytes (256 MiB, room for about two million topics of 120-character names).
	MaxRegisterBodyInflated = 256 << 20
	// maxRegisterEntry bounds one length-prefixed entry (data version, one topic config,
	// the filter server list), in bytes.
	maxRegisterEntry = 1 << 20
)

// maxInflated is MaxRegisterBodyInflated; tests lower it.
var maxInflated int64 = MaxRegisterBodyInflated

// ErrBadCompressedBody is wrapped by the errors of [DecodeCompressedRegisterBody].
var ErrBadCompressedBody = errors.New("namesrv: bad compressed RegisterBrokerBody")

// EncodeCompressedRegisterBody encodes body in the compressed form of REGISTER_BROKER
// (header compressed=true; Java RegisterBrokerBody.encode(true), RocketMQ 4.x): a zlib
// (RFC 1950, Java's DeflaterOutputStream) stream, best compression, of
//
//	int32 len, DataVersion JSON
//	int32 topic count, then per topic: int32 len, "name read write perm filterType"
//	int32 len, filter server list JSON
//
// all integers big-endian. The topic lines carry the five fields Java's
// TopicConfig.encode writes: topicSysFlag and order are not part of this form.
func EncodeCompressedRegisterBody(body *RegisterBrokerBody) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := zlib.NewWriterLevel(&buf, flate.BestCompression)
	if err != nil {
		return nil, err
	}
	var n [4]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		_, _ = zw.Write(n[:])
		_, _ = zw.Write(b)
	}
	dv, err := json.Marshal(body.TopicConfigSerializeWrapper.DataVersion)
	if err != nil {
		return nil, err
	}
	put(dv)
	table := body.TopicConfigSerializeWrapper.TopicConfigTable
	binary.BigEndian.PutUint32(n[:], uint32(len(table)))
	_, _ = zw.Write(n[:])
	for _, tc := range table {
		ft := tc.TopicFilterType
		if ft == "" {
			ft = "SINGLE_TAG"
		}
		put([]byte(tc.TopicName + " " + strconv.Itoa(tc.ReadQueueNums) + " " + strconv.Itoa(tc.WriteQueueNums) +
			" " + strconv.Itoa(tc.Perm) + " " + ft))
	}
	fs := body.FilterServerList
	if fs == nil {
		fs = []string{}
	}
	fsj, err := json.Marshal(fs)
	if err != nil {
		return nil, err
	}
	put(fsj)
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeCompressedRegisterBody decodes the compressed form of a RegisterBrokerBody (see
// [EncodeCompressedRegisterBody]). It inflates at most MaxRegisterBodyInflated bytes,
// refuses entries over 1 MiB and topic counts the data cannot hold, and never allocates
// more than the data read so far justifies. Errors wrap [ErrBadCompressedBody].
func DecodeCompressedRegisterBody(data []byte) (*RegisterBrokerBody, error) {
	zr, err := zlib.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCompressedBody, err)
	}
	defer zr.Close()
	r := &io.LimitedReader{R: zr, N: maxInflated + 1}
	readInt := func() (int, error) {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return 0, err
		}
		return int(int32(binary.BigEndian.Uint32(n[:]))), nil
	}
	readEntry := func(what string) ([]byte, error) {
		n, err := readInt()
		if err != nil {
			return nil, fmt.Errorf("%s length: %w", what, err)
		}
		if n < 0 || n > maxRegisterEntry {
			return nil, fmt.Errorf("%s length %d: must be 0..%d", what, n, maxRegisterEntry)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return b, nil
	}
	fail := func(err error) (*RegisterBrokerBody, error) {
		if r.N <= 0 {
			return nil, fmt.Errorf("%w: inflates to more than %d bytes", ErrBadCompressedBody, maxInflated)
		}
		return nil, fmt.Errorf("%w: %v", ErrBadCompressedBody, err)
	}
	body := &RegisterBrokerBody{}
	dv, err := readEntry("data version")
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(dv, &body.TopicConfigSerializeWrapper.DataVersion); err != nil {
		return fail(fmt.Errorf("data version: %v", err))
	}
	count, err := readInt()
	if err != nil {
		return fail(fmt.Errorf("topic count: %w", err))
	}
	if count < 0 || count > MaxRegisterBodyInflated/8 {
		return fail(fmt.Errorf("topic count %d out of range", count))
	}
	table := make(map[string]*TopicConfig, min(count, 4096))
	for i := range count {
		line, err := readEntry("topic config")
		if err != nil {
			return fail(fmt.Errorf("topic %d: %w", i, err))
		}
		tc, err := parseTopicLine(string(line))
		if err != nil {
			return fail(fmt.Errorf("topic %d: %w", i, err))
		}
		table[tc.TopicName] = tc
	}
	body.TopicConfigSerializeWrapper.TopicConfigTable = table
	fs, err := readEntry("filter server list")
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(fs, &body.FilterServerList); err != nil {
		return fail(fmt.Errorf("filter server list: %v", err))
	}
	return body, nil
}

// parseTopicLine parses Java's TopicConfig.encode form "name read write perm filterType".
func parseTopicLine(s string) (*TopicConfig, error) {
	f := strings.Split(s, " ")
	if len(f) != 5 || f[0] == "" {
		return nil, fmt.Errorf("%.80q: want \"name read write perm filterType\"", s)
	}
	tc := &TopicConfig{TopicName: f[0], TopicFilterType: f[4]}
	var err error
	if tc.ReadQueueNums, err = strconv.Atoi(f[1]); err == nil {
		if tc.WriteQueueNums, err = strconv.Atoi(f[2]); err == nil {
			tc.Perm, err = strconv.Atoi(f[3])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%.80q: %v", s, err)
	}
	return tc, nil
}
