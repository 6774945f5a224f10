package remoting

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// RequestCode is the code field of a RocketMQ 4.x remoting request (Java
// org.apache.rocketmq.common.protocol.RequestCode). It travels as a JSON number
// (or int16 in the binary header) in the header's "code" key.
type RequestCode int16

// Request codes of RocketMQ 4.x (docs/protocol.md §2.1). The direction in each comment is
// who sends the request.
const (
	SendMessage                   RequestCode = 10  // SEND_MESSAGE, client→broker
	PullMessage                   RequestCode = 11  // PULL_MESSAGE, client→broker
	QueryMessage                  RequestCode = 12  // QUERY_MESSAGE, client→broker
	QueryConsumerOffset           RequestCode = 14  // QUERY_CONSUMER_OFFSET, client→broker
	UpdateConsumerOffset          RequestCode = 15  // UPDATE_CONSUMER_OFFSET, client→broker (one-way from Go)
	UpdateAndCreateTopic          RequestCode = 17  // UPDATE_AND_CREATE_TOPIC, admin→broker
	GetAllTopicConfig             RequestCode = 21  // GET_ALL_TOPIC_CONFIG, admin→broker
	SearchOffsetByTimestamp       RequestCode = 29  // SEARCH_OFFSET_BY_TIMESTAMP, client→broker
	GetMaxOffset                  RequestCode = 30  // GET_MAX_OFFSET, client→broker
	GetMinOffset                  RequestCode = 31  // GET_MIN_OFFSET, client→broker
	GetEarliestMsgStoreTime       RequestCode = 32  // GET_EARLIEST_MSG_STORETIME, client→broker
	ViewMessageByID               RequestCode = 33  // VIEW_MESSAGE_BY_ID, client→broker
	HeartBeat                     RequestCode = 34  // HEART_BEAT, client→broker
	UnregisterClient              RequestCode = 35  // UNREGISTER_CLIENT, client→broker (never sent by the Go client)
	ConsumerSendMsgBack           RequestCode = 36  // CONSUMER_SEND_MSG_BACK, client→broker
	EndTransaction                RequestCode = 37  // END_TRANSACTION, client→broker (one-way)
	GetConsumerListByGroup        RequestCode = 38  // GET_CONSUMER_LIST_BY_GROUP, client→broker
	CheckClientConfig             RequestCode = 46  // CHECK_CLIENT_CONFIG, client→broker (Java client, SQL92 subscriptions, at start)
	CheckTransactionState         RequestCode = 39  // CHECK_TRANSACTION_STATE, broker→client (one-way)
	NotifyConsumerIDsChanged      RequestCode = 40  // NOTIFY_CONSUMER_IDS_CHANGED, broker→client
	LockBatchMQ                   RequestCode = 41  // LOCK_BATCH_MQ, client→broker
	UnlockBatchMQ                 RequestCode = 42  // UNLOCK_BATCH_MQ, client→broker
	PutKVConfig                   RequestCode = 100 // PUT_KV_CONFIG, →name server
	GetKVConfig                   RequestCode = 101 // GET_KV_CONFIG, →name server
	DeleteKVConfig                RequestCode = 102 // DELETE_KV_CONFIG, →name server
	RegisterBroker                RequestCode = 103 // REGISTER_BROKER, broker→name server
	UnregisterBroker              RequestCode = 104 // UNREGISTER_BROKER, broker→name server
	GetRouteInfoByTopic           RequestCode = 105 // GET_ROUTEINFO_BY_TOPIC, client→name server
	GetBrokerClusterInfo          RequestCode = 106 // GET_BROKER_CLUSTER_INFO, →name server
	GetAllSubscriptionGroupConfig RequestCode = 201 // GET_ALL_SUBSCRIPTIONGROUP_CONFIG, admin→broker
	GetAllTopicListFromNameServer RequestCode = 206 // GET_ALL_TOPIC_LIST_FROM_NAMESERVER, admin→name server
	DeleteSubscriptionGroup       RequestCode = 207 // DELETE_SUBSCRIPTIONGROUP, admin→broker
	DeleteTopicInBroker           RequestCode = 215 // DELETE_TOPIC_IN_BROKER, admin→broker
	DeleteTopicInNamesrv          RequestCode = 216 // DELETE_TOPIC_IN_NAMESRV, admin→name server
	ResetConsumerClientOffset     RequestCode = 220 // RESET_CONSUMER_CLIENT_OFFSET, broker→client
	GetConsumerStatusFromClient   RequestCode = 221 // GET_CONSUMER_STATUS_FROM_CLIENT, broker→client
	InvokeBrokerToResetOffset     RequestCode = 222 // INVOKE_BROKER_TO_RESET_OFFSET, admin→broker
	GetConsumerRunningInfo        RequestCode = 307 // GET_CONSUMER_RUNNING_INFO, broker→client
	ConsumeMessageDirectly        RequestCode = 309 // CONSUME_MESSAGE_DIRECTLY, broker→client
	SendMessageV2                 RequestCode = 310 // SEND_MESSAGE_V2, client→broker (Java client default; short header)
	SendBatchMessage              RequestCode = 320 // SEND_BATCH_MESSAGE, client→broker (V2 short header)
	QueryDataVersion              RequestCode = 322 // QUERY_DATA_VERSION, broker→name server
	SendReplyMessage              RequestCode = 324 // SEND_REPLY_MESSAGE, client→broker
	SendReplyMessageV2            RequestCode = 325 // SEND_REPLY_MESSAGE_V2, client→broker
	PushReplyMessageToClient      RequestCode = 326 // PUSH_REPLY_MESSAGE_TO_CLIENT, broker→client
)

var requestCodeNames = map[RequestCode]string{
	SendMessage:                   "SEND_MESSAGE",
	PullMessage:                   "PULL_MESSAGE",
	QueryMessage:                  "QUERY_MESSAGE",
	QueryConsumerOffset:           "QUERY_CONSUMER_OFFSET",
	UpdateConsumerOffset:          "UPDATE_CONSUMER_OFFSET",
	UpdateAndCreateTopic:          "UPDATE_AND_CREATE_TOPIC",
	SearchOffsetByTimestamp:       "SEARCH_OFFSET_BY_TIMESTAMP",
	GetAllTopicConfig:             "GET_ALL_TOPIC_CONFIG",
	GetMaxOffset:                  "GET_MAX_OFFSET",
	GetMinOffset:                  "GET_MIN_OFFSET",
	GetEarliestMsgStoreTime:       "GET_EARLIEST_MSG_STORETIME",
	ViewMessageByID:               "VIEW_MESSAGE_BY_ID",
	HeartBeat:                     "HEART_BEAT",
	CheckClientConfig:             "CHECK_CLIENT_CONFIG",
	UnregisterClient:              "UNREGISTER_CLIENT",
	ConsumerSendMsgBack:           "CONSUMER_SEND_MSG_BACK",
	EndTransaction:                "END_TRANSACTION",
	GetConsumerListByGroup:        "GET_CONSUMER_LIST_BY_GROUP",
	CheckTransactionState:         "CHECK_TRANSACTION_STATE",
	NotifyConsumerIDsChanged:      "NOTIFY_CONSUMER_IDS_CHANGED",
	LockBatchMQ:                   "LOCK_BATCH_MQ",
	UnlockBatchMQ:                 "UNLOCK_BATCH_MQ",
	PutKVConfig:                   "PUT_KV_CONFIG",
	GetKVConfig:                   "GET_KV_CONFIG",
	DeleteKVConfig:                "DELETE_KV_CONFIG",
	RegisterBroker:                "REGISTER_BROKER",
	UnregisterBroker:              "UNREGISTER_BROKER",
	GetRouteInfoByTopic:           "GET_ROUTEINFO_BY_TOPIC",
	GetBrokerClusterInfo:          "GET_BROKER_CLUSTER_INFO",
	GetAllSubscriptionGroupConfig: "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
	GetAllTopicListFromNameServer: "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
	DeleteSubscriptionGroup:       "DELETE_SUBSCRIPTIONGROUP",
	DeleteTopicInBroker:           "DELETE_TOPIC_IN_BROKER",
	DeleteTopicInNamesrv:          "DELETE_TOPIC_IN_NAMESRV",
	ResetConsumerClientOffset:     "RESET_CONSUMER_CLIENT_OFFSET",
	GetConsumerStatusFromClient:   "GET_CONSUMER_STATUS_FROM_CLIENT",
	InvokeBrokerToResetOffset:     "INVOKE_BROKER_TO_RESET_OFFSET",
	GetConsumerRunningInfo:        "GET_CONSUMER_RUNNING_INFO",
	ConsumeMessageDirectly:        "CONSUME_MESSAGE_DIRECTLY",
	SendMessageV2:                 "SEND_MESSAGE_V2",
	SendBatchMessage:              "SEND_BATCH_MESSAGE",
	QueryDataVersion:              "QUERY_DATA_VERSION",
	SendReplyMessage:              "SEND_REPLY_MESSAGE",
	SendReplyMessageV2:            "SEND_REPLY_MESSAGE_V2",
	PushReplyMessageToClient:      "PUSH_REPLY_MESSAGE_TO_CLIENT",
}

// String returns the Java constant name of the request code (for example
// "SEND_MESSAGE"), or "RequestCode(n)" for a code this package does not know.
func (c RequestCode) String() string {
	if s, ok := requestCodeNames[c]; ok {
		return s
	}
	return "RequestCode(" + strconv.Itoa(int(c)) + ")"
}

// ResponseCode is the code field of a RocketMQ 4.x remoting response (Java
// ResponseCode and RemotingSysResponseCode). It shares the "code" header key with
// [RequestCode]; the RESPONSE flag bit tells them apart.
type ResponseCode int16

// Response codes of RocketMQ 4.x (docs/protocol.md §2.2).
const (
	Success                            ResponseCode = 0   // SUCCESS
	SystemError                        ResponseCode = 1   // SYSTEM_ERROR: processor exception or ACL failure; producers retry
	SystemBusy                         ResponseCode = 2   // SYSTEM_BUSY: overload; the Go client does not retry
	RequestCodeNotSupported            ResponseCode = 3   // REQUEST_CODE_NOT_SUPPORTED
	TransactionFailed                  ResponseCode = 4   // TRANSACTION_FAILED
	FlushDiskTimeout                   ResponseCode = 10  // FLUSH_DISK_TIMEOUT: the send is still stored
	SlaveNotAvailable                  ResponseCode = 11  // SLAVE_NOT_AVAILABLE: the send is still stored
	FlushSlaveTimeout                  ResponseCode = 12  // FLUSH_SLAVE_TIMEOUT: the send is still stored
	MessageIllegal                     ResponseCode = 13  // MESSAGE_ILLEGAL
	ServiceNotAvailable                ResponseCode = 14  // SERVICE_NOT_AVAILABLE: producers retry
	VersionNotSupported                ResponseCode = 15  // VERSION_NOT_SUPPORTED
	NoPermission                       ResponseCode = 16  // NO_PERMISSION: producers retry
	TopicNotExist                      ResponseCode = 17  // TOPIC_NOT_EXIST: producers retry; from a name server: no route
	TopicExistAlready                  ResponseCode = 18  // TOPIC_EXIST_ALREADY
	PullNotFound                       ResponseCode = 19  // PULL_NOT_FOUND: no new message
	PullRetryImmediately               ResponseCode = 20  // PULL_RETRY_IMMEDIATELY: no message matched the filter
	PullOffsetMoved                    ResponseCode = 21  // PULL_OFFSET_MOVED: the requested offset is illegal
	QueryNotFound                      ResponseCode = 22  // QUERY_NOT_FOUND: e.g. no stored consumer offset
	SubscriptionParseFailed            ResponseCode = 23  // SUBSCRIPTION_PARSE_FAILED
	SubscriptionNotExist               ResponseCode = 24  // SUBSCRIPTION_NOT_EXIST
	SubscriptionNotLatest              ResponseCode = 25  // SUBSCRIPTION_NOT_LATEST
	SubscriptionGroupNotExist          ResponseCode = 26  // SUBSCRIPTION_GROUP_NOT_EXIST
	FilterDataNotExist                 ResponseCode = 27  // FILTER_DATA_NOT_EXIST
	FilterDataNotLatest                ResponseCode = 28  // FILTER_DATA_NOT_LATEST
	TransactionShouldCommit            ResponseCode = 200 // TRANSACTION_SHOULD_COMMIT
	TransactionShouldRollback          ResponseCode = 201 // TRANSACTION_SHOULD_ROLLBACK
	TransactionStateUnknown            ResponseCode = 202 // TRANSACTION_STATE_UNKNOW (sic in Java)
	TransactionStateGroupWrong         ResponseCode = 203 // TRANSACTION_STATE_GROUP_WRONG
	NoBuyerID                          ResponseCode = 204 // NO_BUYER_ID
	NotInCurrentUnit                   ResponseCode = 205 // NOT_IN_CURRENT_UNIT
	ConsumerNotOnline                  ResponseCode = 206 // CONSUMER_NOT_ONLINE
	ConsumeMsgTimeout                  ResponseCode = 207 // CONSUME_MSG_TIMEOUT
	NoMessage                          ResponseCode = 208 // NO_MESSAGE
	UpdateAndCreateACLConfigFailed     ResponseCode = 209 // UPDATE_AND_CREATE_ACL_CONFIG_FAILED
	DeleteACLConfigFailed              ResponseCode = 210 // DELETE_ACL_CONFIG_FAILED
	UpdateGlobalWhiteAddrsConfigFailed ResponseCode = 211 // UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
	FlowControl                        ResponseCode = 215 // FLOW_CONTROL
)

var responseCodeNames = map[ResponseCode]string{
	Success:                            "SUCCESS",
	SystemError:                        "SYSTEM_ERROR",
	SystemBusy:                         "SYSTEM_BUSY",
	RequestCodeNotSupported:            "REQUEST_CODE_NOT_SUPPORTED",
	TransactionFailed:                  "TRANSACTION_FAILED",
	FlushDiskTimeout:                   "FLUSH_DISK_TIMEOUT",
	SlaveNotAvailable:                  "SLAVE_NOT_AVAILABLE",
	FlushSlaveTimeout:                  "FLUSH_SLAVE_TIMEOUT",
	MessageIllegal:                     "MESSAGE_ILLEGAL",
	ServiceNotAvailable:                "SERVICE_NOT_AVAILABLE",
	VersionNotSupported:                "VERSION_NOT_SUPPORTED",
	NoPermission:                       "NO_PERMISSION",
	TopicNotExist:                      "TOPIC_NOT_EXIST",
	TopicExistAlready:                  "TOPIC_EXIST_ALREADY",
	PullNotFound:                       "PULL_NOT_FOUND",
	PullRetryImmediately:               "PULL_RETRY_IMMEDIATELY",
	PullOffsetMoved:                    "PULL_OFFSET_MOVED",
	QueryNotFound:                      "QUERY_NOT_FOUND",
	SubscriptionParseFailed:            "SUBSCRIPTION_PARSE_FAILED",
	SubscriptionNotExist:               "SUBSCRIPTION_NOT_EXIST",
	SubscriptionNotLatest:              "SUBSCRIPTION_NOT_LATEST",
	SubscriptionGroupNotExist:          "SUBSCRIPTION_GROUP_NOT_EXIST",
	FilterDataNotExist:                 "FILTER_DATA_NOT_EXIST",
	FilterDataNotLatest:                "FILTER_DATA_NOT_LATEST",
	TransactionShouldCommit:            "TRANSACTION_SHOULD_COMMIT",
	TransactionShouldRollback:          "TRANSACTION_SHOULD_ROLLBACK",
	TransactionStateUnknown:            "TRANSACTION_STATE_UNKNOW",
	TransactionStateGroupWrong:         "TRANSACTION_STATE_GROUP_WRONG",
	NoBuyerID:                          "NO_BUYER_ID",
	NotInCurrentUnit:                   "NOT_IN_CURRENT_UNIT",
	ConsumerNotOnline:                  "CONSUMER_NOT_ONLINE",
	ConsumeMsgTimeout:                  "CONSUME_MSG_TIMEOUT",
	NoMessage:                          "NO_MESSAGE",
	UpdateAndCreateACLConfigFailed:     "UPDATE_AND_CREATE_ACL_CONFIG_FAILED",
	DeleteACLConfigFailed:              "DELETE_ACL_CONFIG_FAILED",
	UpdateGlobalWhiteAddrsConfigFailed: "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED",
	FlowControl:                        "FLOW_CONTROL",
}

// String returns the Java constant name of the response code (for example
// "TOPIC_NOT_EXIST"), or "ResponseCode(n)" for a code this package does not know.
func (c ResponseCode) String() string {
	if s, ok := responseCodeNames[c]; ok {
		return s
	}
	return "ResponseCode(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether a producer should retry a send that got this code on
// another broker: SYSTEM_ERROR (1), SYSTEM_BUSY (2), SERVICE_NOT_AVAILABLE (14),
// NO_PERMISSION (16) and TOPIC_NOT_EXIST (17). (The official Go client retries
// 1, 14, 16, 17 but not 2; Java's producer also retries SYSTEM_BUSY.)
func (c ResponseCode) Retryable() bool {
	switch c {
	case SystemError, SystemBusy, ServiceNotAvailable, NoPermission, TopicNotExist:
		return true
	}
	return false
}

// LanguageCode is the sender's language in the "language" header field (Java
// org.apache.rocketmq.remoting.protocol.LanguageCode, 4.9.8 list). JSON headers carry
// it as the name string ("GO"); the binary header carries it as one byte.
type LanguageCode byte

// Language codes (docs/protocol.md §1.2).
const (
	LanguageJava   LanguageCode = 0  // JAVA
	LanguageCPP    LanguageCode = 1  // CPP
	LanguageDotNet LanguageCode = 2  // DOTNET
	LanguagePython LanguageCode = 3  // PYTHON
	LanguageDelphi LanguageCode = 4  // DELPHI
	LanguageErlang LanguageCode = 5  // ERLANG
	LanguageRuby   LanguageCode = 6  // RUBY
	LanguageOther  LanguageCode = 7  // OTHER; also what unknown names decode to
	LanguageHTTP   LanguageCode = 8  // HTTP
	LanguageGo     LanguageCode = 9  // GO; what this package sends
	LanguagePHP    LanguageCode = 10 // PHP
	LanguageOMS    LanguageCode = 11 // OMS
	LanguageRust   LanguageCode = 12 // RUST
)

var languageNames = [...]string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"}

// String returns the Java enum name ("GO"), or "LanguageCode(n)" for an unknown value.
func (l LanguageCode) String() string {
	if int(l) < len(languageNames) {
		return languageNames[l]
	}
	return "LanguageCode(" + strconv.Itoa(int(l)) + ")"
}

// MarshalJSON writes the language as its name string, as Java (fastjson) and the Go
// client do. An unknown value is written as "OTHER" so that Java's enum parser accepts it.
func (l LanguageCode) MarshalJSON() ([]byte, error) {
	if int(l) < len(languageNames) {
		return []byte(`"` + languageNames[l] + `"`), nil
	}
	return []byte(`"OTHER"`), nil
}

// UnmarshalJSON accepts any JSON value and never fails: a known name (quoted or not,
// any case) or an ordinal 0..255 gives that code; anything else gives [LanguageOther].
func (l *LanguageCode) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err == nil {
			*l = ParseLanguageCode(s)
			return nil
		}
	}
	if n, err := strconv.Atoi(string(b)); err == nil && n >= 0 && n <= 255 {
		*l = LanguageCode(n)
		return nil
	}
	*l = ParseLanguageCode(string(b))
	return nil
}

// ParseLanguageCode maps a Java language name (case-insensitive, e.g. "JAVA", "go")
// to its code; an unknown name gives [LanguageOther].
func ParseLanguageCode(s string) LanguageCode {
	for i, n := range languageNames {
		if len(n) == len(s) && bytes.EqualFold([]byte(n), []byte(s)) {
			return LanguageCode(i)
		}
	}
	return LanguageOther
}
