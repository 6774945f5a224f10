package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The RocketMQ 5 (gRPC) signature, as the clients of apache/rocketmq-clients send it in
// every call's metadata (docs/security.md, "RocketMQ 5 clients (gRPC port)"):
//
//	x-mq-date-time: 20261202T124537Z
//	authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>/<region>/<service>, SignedHeaders=x-mq-date-time, Signature=<hex>
//
// Signature is the lower-case hex HMAC-SHA1, keyed with the account's secret, of the
// x-mq-date-time value. Only the access key (the Credential's first '/'-separated part)
// is read from the Credential. The signature covers the date-time, not the request, and
// carries no nonce: a captured header can be replayed, for any request of the account,
// while its date-time is within the skew window. Serve the gRPC port with TLS.
const (
	// GRPCAuthorizationKey is the metadata key of the signature.
	GRPCAuthorizationKey = "authorization"
	// GRPCDateTimeKey is the metadata key of the signed date-time.
	GRPCDateTimeKey = "x-mq-date-time"
	// GRPCAlgorithm is the only algorithm the clients send.
	GRPCAlgorithm = "MQv2-HMAC-SHA1"
	// GRPCDateTimeLayout is the date-time's layout (UTC, as its Z says).
	GRPCDateTimeLayout = "20060102T150405Z"
)

// ErrUnauthenticated is wrapped by refusals of [Validator.AuthenticateGRPC] (no, unknown
// or wrong credentials; a date-time outside the skew window). It wraps [ErrDenied].
// Refusals of [GRPCCaller.Check] (an authenticated caller without the permission) wrap
// ErrDenied only.
var ErrUnauthenticated = fmt.Errorf("%w: unauthenticated", ErrDenied)

// GRPCCaller is an authenticated caller of the gRPC port.
type GRPCCaller struct {
	a   *account // nil: a globally white-listed address
	all bool     // every resource check passes
}

// AccessKey is the caller's access key ("" for a globally white-listed address).
func (c *GRPCCaller) AccessKey() string {
	if c.a == nil {
		return ""
	}
	return c.a.AccessKey
}

// Allows reports whether the caller has r's permission.
func (c *GRPCCaller) Allows(r Resource) bool {
	if c.all || c.a == nil {
		return true
	}
	_, ok := c.a.allows(r)
	return ok
}

// Check returns nil when the caller has every resource's permission, else an error
// wrapping [ErrDenied] naming the first resource it lacks.
func (c *GRPCCaller) Check(res ...Resource) error {
	if c.all || c.a == nil {
		return nil
	}
	for _, r := range res {
		if owned, ok := c.a.allows(r); !ok {
			kind, name := "topic", r.Name
			if g, isGroup := strings.CutPrefix(r.Name, RetryPrefix); isGroup {
				kind, name = "group", g
			}
			return fmt.Errorf("%w: accessKey=%s has no %s permission on %s %s (has %s)", ErrDenied, c.a.AccessKey, r.Perm, kind, name, owned)
		}
	}
	return nil
}

// AuthenticateGRPC authenticates a call of the gRPC port from remote ("ip:port") with
// the values of its authorization and x-mq-date-time metadata (empty when absent), by
// the rules of the remoting port: a globally white-listed address passes (with every
// permission when whiteListGrantsAdmin, the default); otherwise the Credential must name
// an account of the file; its whiteRemoteAddress spares the signature; otherwise the
// signature must verify and the date-time be within the signature policy's Skew of the
// broker's clock. The v5 RPCs need no admin permission. Refusals wrap
// [ErrUnauthenticated] and say why without revealing secrets.
func (v *Validator) AuthenticateGRPC(remote, authorization, dateTime string) (*GRPCCaller, error) {
	return v.authenticateGRPC(remote, authorization, dateTime, time.Now())
}

func (v *Validator) authenticateGRPC(remote, authorization, dateTime string, now time.Time) (*GRPCCaller, error) {
	c := v.cur.Load()
	host := Host(remote)
	for _, p := range c.global {
		if p.match(host) {
			return &GRPCCaller{all: c.whiteAdmin}, nil
		}
	}
	if authorization == "" {
		return nil, fmt.Errorf("%w: metadata %s: required (no credentials; call from %s)", ErrUnauthenticated, GRPCAuthorizationKey, host)
	}
	ak, sig, err := parseGRPCAuthorization(authorization)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %s: %v", ErrUnauthenticated, GRPCAuthorizationKey, err)
	}
	a := c.accounts[ak]
	if a == nil {
		return nil, fmt.Errorf("%w: no acl config for %.64s", ErrUnauthenticated, ak)
	}
	allRes := a.owned == nil && a.Admin
	if a.white.match(host) {
		return &GRPCCaller{a: a, all: c.whiteAdmin || allRes}, nil
	}
	if dateTime == "" {
		return nil, fmt.Errorf("%w: metadata %s: required with a signature", ErrUnauthenticated, GRPCDateTimeKey)
	}
	m := hmac.New(sha1.New, []byte(a.SecretKey))
	m.Write([]byte(dateTime))
	if !hmac.Equal(m.Sum(nil), sig) {
		return nil, fmt.Errorf("%w: check signature failed for accessKey=%s", ErrUnauthenticated, ak)
	}
	t, err := time.Parse(GRPCDateTimeLayout, dateTime)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata %s %.32q: want yyyyMMddTHHmmssZ (UTC)", ErrUnauthenticated, GRPCDateTimeKey, dateTime)
	}
	if d := now.Sub(t); d.Abs() > v.policy.Skew {
		return nil, fmt.Errorf("%w: metadata %s %s of accessKey=%s is %v from the broker's clock (%s), more than %v: "+
			"the clients write their local time marked Z, so run them in UTC (TZ=UTC; Java -Duser.timezone=UTC)",
			ErrUnauthenticated, GRPCDateTimeKey, dateTime, ak, d.Round(time.Second), now.UTC().Format(GRPCDateTimeLayout), v.policy.Skew)
	}
	return &GRPCCaller{a: a, all: allRes}, nil
}

// MaxGRPCAuthorization bounds the authorization value parsed, in bytes.
const MaxGRPCAuthorization = 1024

// parseGRPCAuthorization reads the access key and the signature bytes of an
// authorization value "MQv2-HMAC-SHA1 Credential=ak/…, SignedHeaders=x-mq-date-time,
// Signature=hex".
func parseGRPCAuthorization(s string) (ak string, sig []byte, err error) {
	if len(s) > MaxGRPCAuthorization {
		return "", nil, fmt.Errorf("%d bytes, limit %d", len(s), MaxGRPCAuthorization)
	}
	alg, rest, ok := strings.Cut(s, " ")
	if !ok || alg != GRPCAlgorithm {
		return "", nil, fmt.Errorf("want %q followed by Credential, SignedHeaders and Signature", GRPCAlgorithm)
	}
	var signed string
	var haveSig bool
	for _, kv := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return "", nil, fmt.Errorf("item %.32q: want name=value", kv)
		}
		switch k {
		case "Credential":
			ak, _, _ = strings.Cut(val, "/")
		case "SignedHeaders":
			signed = val
		case "Signature":
			if sig, err = hex.DecodeString(val); err != nil || len(sig) != sha1.Size {
				return "", nil, errors.New("Signature: want 40 hexadecimal digits (HMAC-SHA1)")
			}
			haveSig = true
		}
	}
	switch {
	case ak == "":
		return "", nil, errors.New("Credential: no access key")
	case !haveSig:
		return "", nil, errors.New("Signature: required")
	case !strings.EqualFold(signed, GRPCDateTimeKey):
		return "", nil, fmt.Errorf("SignedHeaders %.64q: want %s", signed, GRPCDateTimeKey)
	}
	return ak, sig, nil
}
