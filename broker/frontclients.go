package broker

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/internal/addrkey"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

// Clients of a front end (the RocketMQ 5 clients on the gRPC port) as admin tools see
// them. They have no remoting connection: a front end registers them from their
// heartbeats and settings, and they are listed beside the remoting clients in the
// admin answers (GroupSummaries, GroupSubscriptions, ClientList) with their protocol.
// They take no part in 4.x rebalancing: GET_CONSUMER_LIST_BY_GROUP and
// NOTIFY_CONSUMER_IDS_CHANGED know only remoting consumers (a v5 consumer receives by
// POP, from every queue), and their subscriptions do not filter 4.x pulls.

// Client protocols as admin answers name them.
const (
	ProtocolRemoting = "remoting" // RocketMQ 4.x remoting (HEART_BEAT on the remoting port)
	ProtocolGRPC     = "grpc"     // RocketMQ 5 gRPC MessagingService (broker/grpcfront)
)

// Consume types as heartbeats and admin answers spell them (Java ConsumeType). A v5
// SimpleConsumer is CONSUME_ACTIVELY and a v5 PushConsumer CONSUME_PASSIVELY, as the
// Apache RocketMQ 5 proxy registers them.
const (
	ConsumeActively  = "CONSUME_ACTIVELY"
	ConsumePassively = "CONSUME_PASSIVELY"
)

// Bounds of what a front-end client may name (longer is refused: the values are shown
// in admin tools and kept in memory).
const (
	maxFrontClientID = 256 // bytes of a client id
	maxFrontLabel    = 64  // bytes of a language or version (longer is cut)
)

// FrontClient is one client of a front end, as it registers with
// [Broker.FrontClientHeartbeat].
type FrontClient struct {
	Protocol string // ProtocolGRPC
	ClientID string // the client's id (gRPC metadata x-mq-client-id); required, at most 256 bytes
	Addr     string // the client's ip:port as the front end sees it
	Language string // the client's language ("GO", "JAVA"; metadata x-mq-language); cut at 64 bytes
	Version  string // the client's version ("5.1.4"; metadata x-mq-client-version); cut at 64 bytes
	// Group is the consumer group; "" for a producer (v5 producers have no group).
	Group string
	// ConsumeType is ConsumeActively (simple consumer) or ConsumePassively (push
	// consumer); "" for a producer.
	ConsumeType string
	// Subscriptions are a consumer's topics and filter expressions (from its settings).
	// nil keeps the ones registered before (a heartbeat carries none); a non-nil empty
	// slice clears them.
	Subscriptions []wire.Subscription
	// Topics are a producer's topics (from its settings); nil keeps the ones registered.
	Topics []string
}

// frontKey names one registration: a client may be a producer and a consumer of
// several groups at once.
type frontKey struct{ protocol, clientID, group string }

// frontClient is a registered front-end client.
type frontClient struct {
	FrontClient
	addrKey    string // addrkey.Of(Addr), what the address limits are charged to
	lastUpdate time.Time
}

// FrontClientHeartbeat registers a front end's client, or refreshes it: it is listed by
// admin tools (with its protocol, language, version and subscriptions) until
// [Broker.FrontClientGone] or until its last heartbeat is older than
// clientChannelExpiredTimeout. The client limits of the remoting port apply
// (maxClientEntries, maxClientEntriesPerAddress, maxSubscriptionsPerGroup,
// maxSubscriptions, maxSubscriptionsPerAddress): a registration over one is refused with
// a *ClientLimitError (the client still works; it is not listed). A missing or overlong
// client id, an unknown protocol or a group or topic with an invalid name is an error
// naming the field.
func (b *Broker) FrontClientHeartbeat(c FrontClient) error {
	if c.Protocol != ProtocolGRPC {
		return fmt.Errorf("front client protocol %q: want %q", c.Protocol, ProtocolGRPC)
	}
	if c.ClientID == "" || len(c.ClientID) > maxFrontClientID || !printable(c.ClientID) {
		return fmt.Errorf("front client id %.64q: required, at most %d bytes of printable UTF-8", c.ClientID, maxFrontClientID)
	}
	if c.Group != "" {
		if err := message.ValidateGroupTopics(c.Group); err != nil {
			return fmt.Errorf("front client group: %w", err)
		}
	}
	for _, s := range c.Subscriptions {
		if err := message.ValidateTopic(s.Topic); err != nil {
			return fmt.Errorf("front client subscription topic: %w", err)
		}
	}
	for _, t := range c.Topics {
		if err := message.ValidateTopic(t); err != nil {
			return fmt.Errorf("front client topic: %w", err)
		}
	}
	c.Language, c.Version = label(c.Language), label(c.Version)
	return b.clients.frontHeartbeat(c, time.Now())
}

// FrontClientGone forgets a front end's client (a v5 client's NotifyClientTermination):
// its registration for group, or all of its registrations when group is "".
func (b *Broker) FrontClientGone(protocol, clientID, group string) {
	b.clients.frontGone(protocol, clientID, group)
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// label cuts s to maxFrontLabel bytes (at a rune boundary) and drops what is not
// printable.
func label(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
	for len(s) > maxFrontLabel {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// frontHeartbeat registers or refreshes c under the client limits.
func (m *clientManager) frontHeartbeat(c FrontClient, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := c.Group
	if name == "" {
		name = c.ClientID // a producer: the limit errors name the client
	}
	k := frontKey{c.Protocol, c.ClientID, c.Group}
	cur := m.front[k]
	if c.Subscriptions == nil && cur != nil {
		c.Subscriptions = cur.Subscriptions
	}
	if c.Topics == nil && cur != nil {
		c.Topics = cur.Topics
	}
	if c.Group == "" {
		c.Subscriptions = nil
	}
	subs := dedupSubscriptions(c.Subscriptions)
	if over(len(subs), m.limits.subsPerGroup) {
		return &ClientLimitError{Key: "maxSubscriptionsPerGroup", Group: name, Value: len(subs), Limit: m.limits.subsPerGroup}
	}
	if over(len(c.Topics), m.limits.subsPerGroup) {
		return &ClientLimitError{Key: "maxSubscriptionsPerGroup", Group: name, Value: len(c.Topics), Limit: m.limits.subsPerGroup}
	}
	key := addrkey.Of(c.Addr)
	if cur != nil && cur.addrKey != key {
		// The client came back from another address: charge the new one.
		m.dropFrontLocked(k)
		cur = nil
	}
	held := 0
	if cur != nil {
		held = len(cur.Subscriptions)
	}
	u := m.perAddr[key]
	if cur == nil {
		if over(m.entries+1, m.limits.entries) {
			return &ClientLimitError{Key: "maxClientEntries", Group: name, Value: m.entries + 1, Limit: m.limits.entries}
		}
		if n := 1 + entriesOf(u); over(n, m.limits.entriesPerAddr) {
			return &ClientLimitError{Key: "maxClientEntriesPerAddress", Group: name, Value: n, Limit: m.limits.entriesPerAddr}
		}
	}
	if d := len(subs) - held; d > 0 {
		if over(m.subs+d, m.limits.subs) {
			return &ClientLimitError{Key: "maxSubscriptions", Group: name, Value: m.subs + d, Limit: m.limits.subs}
		}
		if n := subsOf(u) + d; over(n, m.limits.subsPerAddr) {
			return &ClientLimitError{Key: "maxSubscriptionsPerAddress", Group: name, Value: n, Limit: m.limits.subsPerAddr}
		}
	}
	if cur == nil {
		cur = &frontClient{addrKey: key}
		if m.front == nil {
			m.front = map[frontKey]*frontClient{}
		}
		m.front[k] = cur
		m.entries++
		m.addrUseLocked(key).entries++
	}
	d := len(subs) - held
	m.subs += d
	m.addrUseLocked(key).subs += d
	c.Subscriptions = subs
	cur.FrontClient = c
	cur.lastUpdate = now
	return nil
}

func entriesOf(u *addrUse) int {
	if u == nil {
		return 0
	}
	return u.entries
}

func subsOf(u *addrUse) int {
	if u == nil {
		return 0
	}
	return u.subs
}

// dedupSubscriptions returns subs with one entry per topic (the last wins), sorted by
// topic, tags parsed for tag expressions.
func dedupSubscriptions(subs []wire.Subscription) []wire.Subscription {
	if subs == nil {
		return nil
	}
	byTopic := make(map[string]wire.Subscription, len(subs))
	for _, s := range subs {
		if s.ExpressionType == "" {
			s.ExpressionType = "TAG"
		}
		s.Tags = nil
		if s.ExpressionType == "TAG" {
			s.Tags = message.ParseTagExpression(s.SubString)
			sort.Strings(s.Tags)
		}
		byTopic[s.Topic] = s
	}
	out := make([]wire.Subscription, 0, len(byTopic))
	for _, s := range byTopic {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// dropFrontLocked forgets one registration and what it was charged.
func (m *clientManager) dropFrontLocked(k frontKey) {
	c := m.front[k]
	if c == nil {
		return
	}
	delete(m.front, k)
	m.entries--
	m.subs -= len(c.Subscriptions)
	if u := m.perAddr[c.addrKey]; u != nil {
		u.entries--
		u.subs -= len(c.Subscriptions)
		if u.entries <= 0 && u.subs <= 0 {
			delete(m.perAddr, c.addrKey)
		}
	}
}

// frontGone forgets clientID's registration for group, or all of them when group is "".
func (m *clientManager) frontGone(protocol, clientID, group string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if group != "" {
		m.dropFrontLocked(frontKey{protocol, clientID, group})
		return
	}
	for k := range m.front {
		if k.protocol == protocol && k.clientID == clientID {
			m.dropFrontLocked(k)
		}
	}
}

// expireFrontLocked forgets front-end clients whose last heartbeat is older than maxAge.
func (m *clientManager) expireFrontLocked(now time.Time, maxAge time.Duration) {
	for k, c := range m.front {
		if now.Sub(c.lastUpdate) > maxAge {
			m.logf("front-end client heartbeat expired", "protocol", k.protocol, "client", k.clientID, "group", k.group)
			m.dropFrontLocked(k)
		}
	}
}

// frontOfGroupLocked returns the front-end consumers of group.
func (m *clientManager) frontOfGroupLocked(group string) []*frontClient {
	var out []*frontClient
	for k, c := range m.front {
		if k.group == group && group != "" {
			out = append(out, c)
		}
	}
	return out
}
