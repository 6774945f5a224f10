package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/filter"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// SQL92 subscriptions (RocketMQ expression type "SQL92"): the broker evaluates an
// expression over each message's properties (the tag is property TAGS) and delivers only
// the matching messages. Brokers refuse them unless enablePropertyFilter=true is set in
// broker.conf (Apache RocketMQ's default and Sluice's default are false).
//
// The language (RocketMQ 4.9's): numeric, 'string', TRUE, FALSE and NULL constants;
// = <> > >= < <=; [NOT] BETWEEN x AND y; [NOT] IN ('a', ...); IS [NOT] NULL; AND, OR,
// NOT; parentheses. A property missing from a message is NULL, and only IS NULL is true
// for it. See filter.CompileSQL92 in package filter for the full rules.

// Expression types of a subscription (Java ExpressionType; the HEART_BEAT
// subscriptionData and PULL_MESSAGE field expressionType, docs/protocol.md §3.4, §3.6).
const (
	// ExpressionTag is a tag expression: "*" for all, or "TagA || TagB".
	ExpressionTag = wire.ExpressionTypeTag
	// ExpressionSQL92 is a SQL92 expression over message properties.
	ExpressionSQL92 = wire.ExpressionTypeSQL92
)

// SQLSyntaxError is a malformed SQL92 expression, found before any network traffic: Pos
// is the byte offset in the expression where the problem was found, Reason what is wrong.
type SQLSyntaxError = filter.SQLSyntaxError

// ErrSubscriptionRefused matches (errors.Is) the error PushConsumer.Start returns when a
// broker refused a subscription in the consumer's first HEART_BEAT: a SQL92 subscription
// while the broker's enablePropertyFilter is false (response code 1 SYSTEM_ERROR), or an
// expression the broker cannot parse (23 SUBSCRIPTION_PARSE_FAILED). The error also
// wraps the broker's *remoting.ResponseError with its remark.
var ErrSubscriptionRefused = errors.New("consumer: a broker refused the subscription")

// compileSQL checks a SQL92 expression on the client. Errors name the field and wrap
// the *SQLSyntaxError with position and reason.
func compileSQL(field, expr string) error {
	if strings.TrimSpace(expr) == "" {
		return fmt.Errorf("consumer: %s is empty: a SQL92 expression is required (e.g. \"a > 5 AND TAGS IN ('x')\")", field)
	}
	if _, err := filter.CompileSQL92(expr); err != nil {
		shown := expr
		if len(shown) > 200 {
			shown = shown[:200] + "..." // the error names the byte position
		}
		return fmt.Errorf("consumer: %s %q: %w", field, shown, err)
	}
	return nil
}

// newSQLSubscription is the HEART_BEAT subscription data of a SQL92 subscription:
// SubString is the expression, no tags or codes.
func newSQLSubscription(topic, expr string, subVersion int64) wire.SubscriptionData {
	return wire.SubscriptionData{
		Topic:          topic,
		SubString:      expr,
		TagsSet:        []string{},
		CodeSet:        []string{},
		SubVersion:     subVersion,
		ExpressionType: wire.ExpressionTypeSQL92,
	}
}

// SubscribeSQL registers handler for the messages of topic whose properties match the
// SQL92 expression expr, e.g. "region = 'eu' AND amount > 100". The broker filters;
// there is no client-side re-check. Config.Middlewares wrap handler; retried messages of
// topic arrive at the same handler, as with Subscribe.
//
// The expression is compiled on the client first, so a malformed one fails here with a
// *SQLSyntaxError (errors.As) giving the byte position and the reason. Start then sends
// the subscription in HEART_BEAT (expressionType "SQL92") to the brokers of topic and
// fails with ErrSubscriptionRefused if one refuses it (enablePropertyFilter=false, or
// an expression that broker cannot parse). Brokers that appear later and refuse are
// only logged (each heartbeat failure is a warning).
//
// Errors: as Subscribe (a *message.ValidationError for a bad topic, nil handler, topic
// subscribed twice, ErrStarted, ErrClosed), and the expression errors above.
func (c *PushConsumer) SubscribeSQL(topic, expr string, handler middleware.ConsumeFunc) error {
	if err := message.ValidateTopic(topic); err != nil {
		return err
	}
	if message.IsRetryTopic(topic) || message.IsDLQTopic(topic) {
		return &message.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is a retry or DLQ topic; retries of a group are consumed automatically", topic)}
	}
	if err := compileSQL("SubscribeSQL expression", expr); err != nil {
		return err
	}
	if handler == nil {
		return errors.New("consumer: SubscribeSQL: handler is nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateStarted:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if _, dup := c.subs[topic]; dup {
		return fmt.Errorf("consumer: topic %q is already subscribed", topic)
	}
	c.subs[topic] = &subscription{
		topic:   topic,
		data:    newSQLSubscription(topic, expr, time.Now().UnixNano()),
		handler: middleware.ChainConsume(handler, c.cfg.Middlewares...),
	}
	return nil
}

// hasSQL reports whether any subscription is SQL92.
func (c *PushConsumer) hasSQL() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.data.ExpressionType == wire.ExpressionTypeSQL92 {
			return true
		}
	}
	return false
}

// refusedAtStart turns the first heartbeat's error into Start's error when a broker
// refused a subscription: SUBSCRIPTION_PARSE_FAILED (23), or SYSTEM_ERROR (1) while a
// SQL92 subscription is present (the answer to SQL92 with enablePropertyFilter=false).
// The consumer is then shut down (it unregisters from the brokers) and the error wraps
// ErrSubscriptionRefused and the broker's *remoting.ResponseError. Other heartbeat
// failures (a broker not answering) give nil: Start goes on and heartbeats are retried.
func (c *PushConsumer) refusedAtStart(hbErr error) error {
	var re *remoting.ResponseError
	if !errors.As(hbErr, &re) {
		return nil
	}
	if re.Code != remoting.SubscriptionParseFailed && (re.Code != remoting.SystemError || !c.hasSQL()) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), client.DefaultBrokerTimeout)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		c.log.Warn("consumer: shutdown after a refused subscription", "err", err)
	}
	return fmt.Errorf("%w (the consumer is shut down): %w", ErrSubscriptionRefused, hbErr)
}

// pullExpressionType checks a PullRequest's expression type and, for SQL92, its
// expression (compiled on the client: a *SQLSyntaxError with position and reason). It
// returns ExpressionTag or ExpressionSQL92.
func pullExpressionType(req PullRequest) (string, error) {
	switch strings.ToUpper(strings.TrimSpace(req.ExpressionType)) {
	case "", wire.ExpressionTypeTag:
		return wire.ExpressionTypeTag, nil
	case wire.ExpressionTypeSQL92:
		return wire.ExpressionTypeSQL92, compileSQL("PullRequest.Expression", req.Expression)
	}
	return "", fmt.Errorf("consumer: PullRequest.ExpressionType %q: must be %q (default) or %q", req.ExpressionType, ExpressionTag, ExpressionSQL92)
}
