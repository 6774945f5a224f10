package acl

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/remoting"
)

// RetryPrefix marks a resource as a consumer group: groups are checked through their
// retry topic %RETRY%<group>, as in RocketMQ.
const RetryPrefix = "%RETRY%"

// Resource is one topic or group a request touches and the permission it needs. A group
// is named by its retry topic (see [Group]).
type Resource struct {
	Name string
	Perm Perm
}

// Topic returns the resource for topic needing perm.
func Topic(topic string, perm Perm) Resource { return Resource{Name: topic, Perm: perm} }

// Group returns the resource for consumer group needing perm (named %RETRY%<group>).
func Group(group string, perm Perm) Resource { return Resource{Name: RetryPrefix + group, Perm: perm} }

// ErrDenied is wrapped by every refusal of [Validator.Check]; the broker answers it with
// SYSTEM_ERROR (1) and the error text as remark, as RocketMQ does with AclException.
var ErrDenied = errors.New("acl")

// account is a compiled Account.
type account struct {
	Account
	white     *addrPattern
	topicPerm Perm
	groupPerm Perm
	owned     map[string]Perm // topic or %RETRY%group -> perm; nil when none given
}

// compiled is an immutable, checked ACL file.
type compiled struct {
	global     []*addrPattern
	accounts   map[string]*account
	whiteAdmin bool // File.WhiteListGrantsAdmin
}

func compile(f *File) (*compiled, error) {
	c := &compiled{accounts: map[string]*account{}, whiteAdmin: f.WhiteListGrantsAdmin == nil || *f.WhiteListGrantsAdmin}
	for _, s := range f.GlobalWhiteRemoteAddresses {
		p, err := parseAddrPattern(s)
		if err != nil {
			return nil, err
		}
		c.global = append(c.global, p)
	}
	for _, a := range f.Accounts {
		ac := &account{Account: a, topicPerm: ParsePerm(a.DefaultTopicPerm), groupPerm: ParsePerm(a.DefaultGroupPerm)}
		if a.WhiteRemoteAddress != "" {
			p, err := parseAddrPattern(a.WhiteRemoteAddress)
			if err != nil {
				return nil, err
			}
			ac.white = p
		}
		add := func(name string, p Perm) {
			if ac.owned == nil {
				ac.owned = map[string]Perm{}
			}
			ac.owned[name] = p
		}
		for _, e := range a.TopicPerms {
			n, p, err := splitPerm(e)
			if err != nil {
				return nil, err
			}
			add(n, p)
		}
		for _, e := range a.GroupPerms {
			n, p, err := splitPerm(e)
			if err != nil {
				return nil, err
			}
			add(RetryPrefix+n, p)
		}
		c.accounts[a.AccessKey] = ac
	}
	return c, nil
}

// SignaturePolicy is how a Validator treats Sluice's signature v2
// (remoting.SignatureV2) and RocketMQ's v1.
type SignaturePolicy struct {
	// Skew is how far a v2 signature's time may be from the verifier's clock. Default
	// 5 minutes.
	Skew time.Duration
	// RefuseV1ForAdmin refuses admin-only request codes signed with v1 (which covers
	// neither the request code nor a time: a captured admin read replays as a delete).
	// Default false.
	RefuseV1ForAdmin bool
	// MaxNonces bounds the v2 nonces remembered (each for twice Skew); beyond it, once
	// the expired ones are gone, v2 requests are refused. Default 1,000,000.
	MaxNonces int
	// MaxNoncesPerAccount is one account's share of MaxNonces: an account holding it is
	// refused (*NonceQuotaError) until its nonces expire, others are unaffected.
	// Default MaxNonces/10.
	MaxNoncesPerAccount int
	// FloorFile, when set, keeps the highest v2 time accepted, so that after a restart
	// (when the nonces seen are forgotten) a request signed before it is refused. Without
	// it the floor is the time the policy was set. See docs/security.md.
	FloorFile string
}

// Validator checks requests against an ACL file. It is safe for concurrent use; Reload
// and Watch swap the rules atomically.
type Validator struct {
	policy SignaturePolicy
	nonces nonceCache
	floor  *sigFloor

	path string
	log  *slog.Logger
	cur  atomic.Pointer[compiled]
	sum  atomic.Pointer[[32]byte] // hash of the loaded file's bytes
	// refused counts file contents Watch refused (the previous rules stayed in force).
	refused atomic.Int64
}

// Refused returns how many times Watch found a changed file it could not apply (empty,
// malformed, unreadable) and kept the previous rules; each is also logged at error.
func (v *Validator) Refused() int64 { return v.refused.Load() }

// SetSignaturePolicy sets how signatures v1 and v2 are treated (zero fields: defaults).
// Call it before the Validator is in use. It fails only when FloorFile cannot be read.
func (v *Validator) SetSignaturePolicy(p SignaturePolicy) error {
	if p.Skew <= 0 {
		p.Skew = 5 * time.Minute
	}
	if p.MaxNonces <= 0 {
		p.MaxNonces = 1_000_000
	}
	if p.MaxNoncesPerAccount <= 0 {
		p.MaxNoncesPerAccount = max(p.MaxNonces/10, 1)
	}
	f, err := openFloor(p.FloorFile, time.Now())
	if err != nil {
		return err
	}
	v.policy, v.floor = p, f
	return nil
}

// SaveSignatureFloor writes the highest signature v2 time accepted to the policy's
// FloorFile (if any); call it at a clean stop.
func (v *Validator) SaveSignatureFloor() error { return v.floor.save() }

// NonceQuotaRefused returns how many signature v2 requests were refused because their
// account held its share of the nonce store (MaxNoncesPerAccount).
func (v *Validator) NonceQuotaRefused() int64 { return v.nonces.refusedQuota() }

// New returns a Validator with the rules of f (already parsed).
func New(f *File) (*Validator, error) {
	c, err := compile(f)
	if err != nil {
		return nil, err
	}
	v := &Validator{log: slog.Default()}
	_ = v.SetSignaturePolicy(SignaturePolicy{}) // no FloorFile: cannot fail
	v.cur.Store(c)
	return v, nil
}

// Load reads and parses the ACL file at path (see [Parse]) and returns a Validator whose
// Reload and Watch re-read that file. log receives reload events (nil: slog.Default()).
func Load(path string, log *slog.Logger) (*Validator, error) {
	if log == nil {
		log = slog.Default()
	}
	v := &Validator{path: path, log: log}
	_ = v.SetSignaturePolicy(SignaturePolicy{}) // no FloorFile: cannot fail
	if _, err := v.Reload(); err != nil {
		return nil, err
	}
	return v, nil
}

// Reload re-reads the file given to Load and applies it at once. It reports whether the
// rules changed; on any error the previous rules stay in force.
func (v *Validator) Reload() (bool, error) {
	data, err := v.read()
	if err != nil {
		return false, err
	}
	return v.apply(data)
}

// read returns the content of the file given to Load, refusing one over MaxFileSize.
func (v *Validator) read() ([]byte, error) {
	if v.path == "" {
		return nil, errors.New("acl: validator was not loaded from a file")
	}
	st, err := os.Stat(v.path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrFileTooLarge, v.path, st.Size(), MaxFileSize)
	}
	data, err := os.ReadFile(v.path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	return data, nil
}

// apply parses data and swaps the rules in when they differ from those in force.
func (v *Validator) apply(data []byte) (bool, error) {
	sum := sha256.Sum256(data)
	if old := v.sum.Load(); old != nil && *old == sum {
		return false, nil
	}
	f, err := Parse(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", v.path, err)
	}
	c, err := compile(f)
	if err != nil {
		return false, fmt.Errorf("%s: %w", v.path, err)
	}
	v.cur.Store(c)
	v.sum.Store(&sum)
	return true, nil
}

// Watch re-reads the file every interval (default 1 s when <= 0) until ctx ends, as
// RocketMQ's file watch does. A changed content is applied once it has stayed the same
// for one interval, so a file caught half-written (an editor truncating, then writing)
// is not applied; changes are logged at info, a broken file at error (the previous rules
// stay in force).
func (v *Validator) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	var seen, lastRefused [32]byte // content seen at the previous tick; the last content refused
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := v.read()
		var changed bool
		var sum [32]byte
		if err == nil {
			sum = sha256.Sum256(data)
			if sum != seen {
				seen = sum // changed since the last tick: wait until it holds still
				continue
			}
			changed, err = v.apply(data)
		}
		switch {
		case err != nil:
			if err.Error() != lastErr || sum != lastRefused {
				v.refused.Add(1)
				v.log.Error("acl file not reloaded; previous rules stay in force", "file", v.path, "err", err)
			}
			lastErr, lastRefused = err.Error(), sum
		case changed:
			lastErr = ""
			v.log.Info("acl file reloaded", "file", v.path)
		}
	}
}

// CheckAdmin reports why accessKey/secretKey is not an admin account of the rules in
// force (unknown key, wrong secret, not admin), or nil when it is.
func (v *Validator) CheckAdmin(accessKey, secretKey string) error {
	a := v.cur.Load().accounts[accessKey]
	switch {
	case accessKey == "":
		return errors.New("no accessKey")
	case a == nil:
		return fmt.Errorf("accessKey %.64s is not an account of the acl file", accessKey)
	case a.SecretKey != secretKey:
		return fmt.Errorf("secretKey is not accessKey %.64s's secret in the acl file", accessKey)
	case !a.Admin:
		return fmt.Errorf("accessKey %.64s is not an admin account", accessKey)
	}
	return nil
}

// Host returns the address part of a remote "ip:port" (as RocketMQ matches white lists
// without the port).
func Host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Check decides whether the request cmd from remote ("ip:port") may run (RocketMQ 4.9.8
// PlainPermissionManager.validate): a globally white-listed address passes; otherwise
// the AccessKey must be known; the account's white address passes; otherwise the
// signature must verify ([remoting.VerifySignature]); then an admin-only request needs
// an admin account, and each resource needs its permission (the account's entry for it,
// else its default topic or group permission; an admin account without entries passes).
// Refusals wrap [ErrDenied] and say why without revealing secrets.
func (v *Validator) Check(remote string, cmd *remoting.RemotingCommand, admin bool, res []Resource) error {
	a, all, err := v.authenticate(remote, cmd, admin)
	if err != nil || all {
		return err
	}
	if a == nil { // a globally white-listed address, when the white list does not grant admin
		if admin {
			return fmt.Errorf("%w: request code %d needs a signed admin account (whiteListGrantsAdmin is false)", ErrDenied, cmd.Code)
		}
		return nil
	}
	if admin && !a.Admin {
		return fmt.Errorf("%w: need admin permission for request code=%d, but accessKey=%s is not", ErrDenied, cmd.Code, a.AccessKey)
	}
	for _, r := range res {
		if owned, ok := a.allows(r); !ok {
			kind, name := "topic", r.Name
			if g, isGroup := strings.CutPrefix(r.Name, RetryPrefix); isGroup {
				kind, name = "group", g
			}
			return fmt.Errorf("%w: accessKey=%s has no %s permission on %s %s (has %s)", ErrDenied, a.AccessKey, r.Perm, kind, name, owned)
		}
	}
	return nil
}

// authenticate finds the account of cmd from remote and verifies its signature, as
// Check does. all reports a caller every resource check passes: a white-listed address
// (global, or the account's) or an admin account without entries (a is then nil for a
// globally white-listed address).
func (v *Validator) authenticate(remote string, cmd *remoting.RemotingCommand, admin bool) (a *account, all bool, err error) {
	c := v.cur.Load()
	host := Host(remote)
	ak, _ := cmd.Ext(remoting.ExtAccessKey)
	for _, p := range c.global {
		if p.match(host) {
			if c.whiteAdmin || !admin || ak == "" {
				return nil, c.whiteAdmin, nil
			}
			break // an admin code from a white-listed address: the account must sign it
		}
	}
	if ak == "" {
		return nil, false, fmt.Errorf("%w: no accessKey is configured (request code %d from %s)", ErrDenied, cmd.Code, host)
	}
	a = c.accounts[ak]
	if a == nil {
		return nil, false, fmt.Errorf("%w: no acl config for %.64s", ErrDenied, ak)
	}
	if a.white.match(host) {
		if c.whiteAdmin {
			return a, true, nil
		}
		return a, a.owned == nil && a.Admin, nil // spared the signature, not the checks
	}
	if err := v.verify(a, cmd, admin); err != nil {
		return nil, false, err
	}
	return a, a.owned == nil && a.Admin, nil
}

// verify checks the signature of cmd by account a: v2 (remoting.SignatureV2) with its
// time within the skew window and a nonce not seen before, or v1 unless admin and the
// policy refuses v1 for admin codes.
func (v *Validator) verify(a *account, cmd *remoting.RemotingCommand, admin bool) error {
	ak := a.AccessKey
	if ver, _ := cmd.Ext(remoting.ExtSigVersion); ver != "" {
		if !remoting.VerifySignatureV2(a.SecretKey, cmd) {
			return fmt.Errorf("%w: check signature v2 failed for accessKey=%s", ErrDenied, ak)
		}
		ts, _ := cmd.Ext(remoting.ExtSigTime)
		nonce, _ := cmd.Ext(remoting.ExtSigNonce)
		ms, err := strconv.ParseInt(ts, 10, 64)
		now := time.Now()
		if err != nil || now.Sub(time.UnixMilli(ms)).Abs() > v.policy.Skew {
			return fmt.Errorf("%w: signature v2 time %.32q of accessKey=%s is not within %v of the broker's clock", ErrDenied, ts, ak, v.policy.Skew)
		}
		if len(nonce) < 16 || len(nonce) > 64 {
			return fmt.Errorf("%w: signature v2 nonce of accessKey=%s must have 16..64 characters", ErrDenied, ak)
		}
		if err := v.floor.admit(ms, now); err != nil {
			return fmt.Errorf("%w: accessKey=%s: %v", ErrDenied, ak, err)
		}
		if err := v.nonces.add(ak, nonce, now, 2*v.policy.Skew, v.policy.MaxNonces, v.policy.MaxNoncesPerAccount); err != nil {
			return fmt.Errorf("%w: %w", ErrDenied, err)
		}
		return nil
	}
	if !remoting.VerifySignature(a.SecretKey, cmd) {
		return fmt.Errorf("%w: check signature failed for accessKey=%s", ErrDenied, ak)
	}
	if admin && v.policy.RefuseV1ForAdmin {
		return fmt.Errorf("%w: request code %d needs signature v2 (aclRefuseV1ForAdmin): accessKey=%s signed with v1", ErrDenied, cmd.Code, ak)
	}
	return nil
}

// allows reports whether the account has r's permission, and what it has on r.
func (a *account) allows(r Resource) (Perm, bool) {
	owned, ok := a.owned[r.Name]
	if !ok {
		owned = a.topicPerm
		if strings.HasPrefix(r.Name, RetryPrefix) {
			owned = a.groupPerm
		}
	}
	return owned, owned.Allows(r.Perm)
}

// Permits authenticates cmd from remote as Check does and returns what the caller may
// see: a function reporting whether it has the permission of a resource (always true
// for a white-listed address or an admin account without entries). Listings use it to
// leave out what the account has no permission on. Errors wrap ErrDenied.
func (v *Validator) Permits(remote string, cmd *remoting.RemotingCommand) (func(Resource) bool, error) {
	a, all, err := v.authenticate(remote, cmd, false)
	switch {
	case err != nil:
		return nil, err
	case all, a == nil:
		return func(Resource) bool { return true }, nil
	}
	return func(r Resource) bool { _, ok := a.allows(r); return ok }, nil
}
