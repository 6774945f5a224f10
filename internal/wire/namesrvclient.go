package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/sluicemq/sluice/remoting"
)

// ErrTopicNotExist is returned (wrapped, with the topic) by [GetRouteInfo] when the
// name server answers TOPIC_NOT_EXIST (17): it has no route for the topic.
var ErrTopicNotExist = errors.New("wire: no route for topic")

// ErrKVNotFound is returned (wrapped) by [GetKVConfig] when the name server answers
// QUERY_NOT_FOUND (22).
var ErrKVNotFound = errors.New("wire: kv config not found")

// RegisterBrokerRequest is what a broker sends with REGISTER_BROKER (RocketMQ request
// code 103, docs/protocol.md §3.2).
type RegisterBrokerRequest struct {
	ClusterName  string // required, e.g. "DefaultCluster"
	BrokerName   string // required, e.g. "broker-a"
	BrokerAddr   string // required, "ip:port" clients connect to
	BrokerID     int64  // 0 = master ([MasterID]), ≥ 1 = slave
	HAServerAddr string // "ip:port" of the HA service; may be empty
	// Topics is the topic table to register (key = topic name) and its version; the
	// name server re-reads it only when the DataVersion changed.
	Topics           TopicConfigSerializeWrapper
	FilterServerList []string // usually empty
	// Compress sends the body in RocketMQ's compressed form (header compressed=true,
	// see [EncodeCompressedRegisterBody]); it drops topicSysFlag and order.
	Compress bool
}

// RegisterBrokerResult is the name server's answer to REGISTER_BROKER.
type RegisterBrokerResult struct {
	HAServerAddr string // master's HA address (slave registrations only), else ""
	MasterAddr   string // master's address (slave registrations only), else ""
	// OrderTopicConfig is the KV namespace ORDER_TOPIC_CONFIG (topic → orderTopicConf),
	// nil when empty.
	OrderTopicConfig map[string]string
}

// RegisterBroker sends REGISTER_BROKER (103) to the name server at addr with a JSON
// RegisterBrokerBody (or the compressed form when req.Compress) and its bodyCrc32
// (crc32(body) & 0x7FFFFFFF). Errors: a missing required field (before sending), a
// transport error from c, a non-success response as *remoting.ResponseError, or an
// undecodable response body.
func RegisterBroker(ctx context.Context, c *remoting.Client, addr string, req RegisterBrokerRequest) (*RegisterBrokerResult, error) {
	b, err := EncodeRegisterBody(req)
	if err != nil {
		return nil, err
	}
	return RegisterBrokerEncoded(ctx, c, addr, req, b)
}

// EncodeRegisterBody encodes the body of req as RegisterBroker sends it: JSON, or the
// compressed form when req.Compress. Errors: a missing required field.
func EncodeRegisterBody(req RegisterBrokerRequest) ([]byte, error) {
	switch {
	case req.ClusterName == "":
		return nil, errors.New("wire: RegisterBrokerRequest.ClusterName is empty")
	case req.BrokerName == "":
		return nil, errors.New("wire: RegisterBrokerRequest.BrokerName is empty")
	case req.BrokerAddr == "":
		return nil, errors.New("wire: RegisterBrokerRequest.BrokerAddr is empty")
	case req.BrokerID < 0:
		return nil, fmt.Errorf("wire: RegisterBrokerRequest.BrokerID %d: must be >= 0", req.BrokerID)
	}
	body := RegisterBrokerBody{TopicConfigSerializeWrapper: req.Topics, FilterServerList: req.FilterServerList}
	if body.TopicConfigSerializeWrapper.TopicConfigTable == nil {
		body.TopicConfigSerializeWrapper.TopicConfigTable = map[string]*TopicConfig{}
	}
	if body.FilterServerList == nil {
		body.FilterServerList = []string{}
	}
	if req.Compress {
		return EncodeCompressedRegisterBody(&body)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("wire: encode RegisterBrokerBody: %w", err)
	}
	return b, nil
}

// RegisterBrokerEncoded sends REGISTER_BROKER with a body encoded by
// [EncodeRegisterBody] for the same req (so a caller can measure or reuse it).
func RegisterBrokerEncoded(ctx context.Context, c *remoting.Client, addr string, req RegisterBrokerRequest, b []byte) (*RegisterBrokerResult, error) {
	cmd := remoting.NewRequest(remoting.RegisterBroker, map[string]string{
		"brokerName":   req.BrokerName,
		"brokerAddr":   req.BrokerAddr,
		"clusterName":  req.ClusterName,
		"haServerAddr": req.HAServerAddr,
		"brokerId":     strconv.FormatInt(req.BrokerID, 10),
		"compressed":   strconv.FormatBool(req.Compress),
		"bodyCrc32":    strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)&0x7FFFFFFF), 10),
	}, b)
	resp, err := invoke(ctx, c, addr, cmd)
	if err != nil {
		return nil, err
	}
	res := &RegisterBrokerResult{HAServerAddr: resp.ExtFields["haServerAddr"], MasterAddr: resp.ExtFields["masterAddr"]}
	if len(resp.Body) > 0 {
		var kv KVTable
		if err := json.Unmarshal(resp.Body, &kv); err != nil {
			return nil, fmt.Errorf("wire: decode REGISTER_BROKER response body: %w", err)
		}
		if len(kv.Table) > 0 {
			res.OrderTopicConfig = kv.Table
		}
	}
	return res, nil
}

// UnregisterBrokerRequest identifies the broker to remove with UNREGISTER_BROKER (104).
type UnregisterBrokerRequest struct {
	ClusterName string
	BrokerName  string
	BrokerAddr  string
	BrokerID    int64
}

// UnregisterBroker sends UNREGISTER_BROKER (104) to the name server at addr. Errors:
// transport errors from c, or a non-success response as *remoting.ResponseError.
func UnregisterBroker(ctx context.Context, c *remoting.Client, addr string, req UnregisterBrokerRequest) error {
	cmd := remoting.NewRequest(remoting.UnregisterBroker, map[string]string{
		"brokerName":  req.BrokerName,
		"brokerAddr":  req.BrokerAddr,
		"clusterName": req.ClusterName,
		"brokerId":    strconv.FormatInt(req.BrokerID, 10),
	}, nil)
	_, err := invoke(ctx, c, addr, cmd)
	return err
}

// GetRouteInfo asks the name server at addr for the route of topic
// (GET_ROUTEINFO_BY_TOPIC, 105). It sends acceptStandardJsonOnly=true (so a Java 4.9
// name server answers strict JSON) and parses either dialect ([ParseTopicRouteData]).
// Errors: [ErrTopicNotExist] (wrapped) for code 17, transport errors from c, other
// codes as *remoting.ResponseError, an empty or unusable body ([*RouteError], wrapping [ErrBadRouteData]).
func GetRouteInfo(ctx context.Context, c *remoting.Client, addr, topic string) (*TopicRouteData, error) {
	cmd := remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{
		"topic":                  topic,
		"acceptStandardJsonOnly": "true",
	}, nil)
	resp, err := c.InvokeSync(ctx, addr, cmd)
	if err != nil {
		return nil, err
	}
	switch resp.ResponseCode() {
	case remoting.Success:
		return ParseTopicRouteData(topic, resp.Body)
	case remoting.TopicNotExist:
		return nil, fmt.Errorf("%w %q (name server %s: %s)", ErrTopicNotExist, topic, addr, resp.Remark)
	default:
		return nil, resp.ResponseErrFor(remoting.GetRouteInfoByTopic, "", addr)
	}
}

// GetAllTopicList returns every topic the name server at addr has queue data for
// (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206), as sent (a Sluice name server sorts them).
func GetAllTopicList(ctx context.Context, c *remoting.Client, addr string) ([]string, error) {
	resp, err := invoke(ctx, c, addr, remoting.NewRequest(remoting.GetAllTopicListFromNameServer, nil, nil))
	if err != nil {
		return nil, err
	}
	var tl TopicList
	if err := json.Unmarshal(resp.Body, &tl); err != nil {
		return nil, fmt.Errorf("wire: decode TopicList: %w", err)
	}
	if tl.TopicList == nil {
		tl.TopicList = []string{}
	}
	return tl.TopicList, nil
}

// GetBrokerClusterInfo returns the brokers and clusters known to the name server at
// addr (GET_BROKER_CLUSTER_INFO, 106). The body is parsed like a route, so the
// fastjson unquoted-key dialect of a Java name server is accepted too.
func GetBrokerClusterInfo(ctx context.Context, c *remoting.Client, addr string) (*ClusterInfo, error) {
	resp, err := invoke(ctx, c, addr, remoting.NewRequest(remoting.GetBrokerClusterInfo, nil, nil))
	if err != nil {
		return nil, err
	}
	return ParseClusterInfo(resp.Body)
}

// DeleteTopic removes the topic's route from the name server at addr
// (DELETE_TOPIC_IN_NAMESRV, 216). A non-empty clusterName limits the removal to that
// cluster's brokers (Sluice and Java ≥ 4.9.4; older Java name servers ignore it).
func DeleteTopic(ctx context.Context, c *remoting.Client, addr, topic, clusterName string) error {
	ext := map[string]string{"topic": topic}
	if clusterName != "" {
		ext["clusterName"] = clusterName
	}
	_, err := invoke(ctx, c, addr, remoting.NewRequest(remoting.DeleteTopicInNamesrv, ext, nil))
	return err
}

// PutKVConfig stores namespace/key=value on the name server at addr (PUT_KV_CONFIG,
// 100). For namespace [NamespaceOrderTopicConfig] the key is a topic and the value its
// orderTopicConf ("brokerName:queueNums;...").
func PutKVConfig(ctx context.Context, c *remoting.Client, addr, namespace, key, value string) error {
	_, err := invoke(ctx, c, addr, remoting.NewRequest(remoting.PutKVConfig,
		map[string]string{"namespace": namespace, "key": key, "value": value}, nil))
	return err
}

// GetKVConfig reads namespace/key from the name server at addr (GET_KV_CONFIG, 101).
// A missing key gives [ErrKVNotFound] (wrapped).
func GetKVConfig(ctx context.Context, c *remoting.Client, addr, namespace, key string) (string, error) {
	cmd := remoting.NewRequest(remoting.GetKVConfig, map[string]string{"namespace": namespace, "key": key}, nil)
	resp, err := c.InvokeSync(ctx, addr, cmd)
	if err != nil {
		return "", err
	}
	switch resp.ResponseCode() {
	case remoting.Success:
		return resp.ExtFields["value"], nil
	case remoting.QueryNotFound:
		return "", fmt.Errorf("%w: namespace %q key %q", ErrKVNotFound, namespace, key)
	default:
		return "", resp.ResponseErrFor(remoting.GetKVConfig, "", addr)
	}
}

// DeleteKVConfig removes namespace/key from the name server at addr (DELETE_KV_CONFIG,
// 102); removing a missing key succeeds.
func DeleteKVConfig(ctx context.Context, c *remoting.Client, addr, namespace, key string) error {
	_, err := invoke(ctx, c, addr, remoting.NewRequest(remoting.DeleteKVConfig,
		map[string]string{"namespace": namespace, "key": key}, nil))
	return err
}

// QueryDataVersion asks the name server at addr whether version differs from the one
// it holds for the broker at brokerAddr (QUERY_DATA_VERSION, 322). stored is the name
// server's version, nil if the broker is not registered. When changed is false the
// name server counts the call as a registration for expiry.
func QueryDataVersion(ctx context.Context, c *remoting.Client, addr string, req UnregisterBrokerRequest, version DataVersion) (changed bool, stored *DataVersion, err error) {
	b, err := json.Marshal(version)
	if err != nil {
		return false, nil, err
	}
	cmd := remoting.NewRequest(remoting.QueryDataVersion, map[string]string{
		"brokerName":  req.BrokerName,
		"brokerAddr":  req.BrokerAddr,
		"clusterName": req.ClusterName,
		"brokerId":    strconv.FormatInt(req.BrokerID, 10),
	}, b)
	resp, err := invoke(ctx, c, addr, cmd)
	if err != nil {
		return false, nil, err
	}
	changed, err = resp.ExtBool("changed")
	if err != nil {
		return false, nil, err
	}
	if len(resp.Body) > 0 {
		stored = new(DataVersion)
		if err := json.Unmarshal(resp.Body, stored); err != nil {
			return false, nil, fmt.Errorf("wire: decode DataVersion: %w", err)
		}
	}
	return changed, stored, nil
}

// invoke sends cmd and turns a non-success response into *remoting.ResponseError
// (with the request and the name server's address).
func invoke(ctx context.Context, c *remoting.Client, addr string, cmd *remoting.RemotingCommand) (*remoting.RemotingCommand, error) {
	req := cmd.RequestCode()
	resp, err := c.InvokeSync(ctx, addr, cmd)
	if err != nil {
		return nil, err
	}
	if err := resp.ResponseErrFor(req, "", addr); err != nil {
		return nil, err
	}
	return resp, nil
}
