package remoting

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"sort"
)

// Ext-field names of RocketMQ plain ACL 1.0 (Java SessionCredentials, docs/protocol.md §8.1).
const (
	ExtAccessKey     = "AccessKey"     // the account's access key
	ExtSignature     = "Signature"     // Base64(HmacSHA1(secretKey, content))
	ExtSecurityToken = "SecurityToken" // optional STS token; sent as is
	// ExtUniqueKeyQuery is left out of the signed content by the Java broker
	// (MixAll.UNIQUE_MSG_QUERY_FLAG).
	ExtUniqueKeyQuery = "_UNIQUE_KEY_QUERY"
)

// Credentials are the RocketMQ plain-ACL credentials a client signs its requests with.
// Requests are signed only when both AccessKey and SecretKey are set, as the official
// clients do.
type Credentials struct {
	AccessKey     string
	SecretKey     string
	SecurityToken string // optional; sent in ext SecurityToken and signed (Java clients sign it)
}

// Enabled reports whether c signs requests (AccessKey and SecretKey both set).
func (c Credentials) Enabled() bool { return c.AccessKey != "" && c.SecretKey != "" }

// Sign adds AccessKey (and SecurityToken when set) to cmd's ext fields and then the
// Signature computed over them with [Signature], as RocketMQ's AclClientRPCHook does.
// Signing again (a retry) gives the same result. Nothing happens when c is not Enabled.
// A request in list form (ExtList) is converted to a map first ([RemotingCommand.ExtMap]).
func (c Credentials) Sign(cmd *RemotingCommand) {
	if !c.Enabled() || cmd == nil {
		return
	}
	cmd.ExtMap() // a request in list form is signed over all its fields
	if cmd.ExtFields == nil {
		cmd.ExtFields = make(map[string]string, 3)
	}
	cmd.ExtFields[ExtAccessKey] = c.AccessKey
	if c.SecurityToken != "" {
		cmd.ExtFields[ExtSecurityToken] = c.SecurityToken
	}
	delete(cmd.ExtFields, ExtSignature)
	cmd.ExtFields[ExtSignature] = Signature(c.SecretKey, cmd.ExtFields, cmd.Body, false)
}

// Signature computes a RocketMQ plain-ACL signature (docs/protocol.md §8.1): the values of ext
// sorted by key (byte order), without Signature and _UNIQUE_KEY_QUERY, concatenated with
// no separator, then the body bytes; HMAC-SHA1 keyed with secretKey (UTF-8); standard
// Base64 with padding. withoutToken leaves the SecurityToken value out of the content, as
// the official Go client does (Java includes it); a verifier accepts either.
func Signature(secretKey string, ext map[string]string, body []byte, withoutToken bool) string {
	keys := make([]string, 0, len(ext))
	for k := range ext {
		if k == ExtSignature || k == ExtUniqueKeyQuery || (withoutToken && k == ExtSecurityToken) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	mac := hmac.New(sha1.New, []byte(secretKey))
	for _, k := range keys {
		mac.Write([]byte(ext[k]))
	}
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// VerifySignature reports whether cmd carries a Signature made with secretKey over its
// ext fields and body, accepting both the Java content (SecurityToken included) and the
// official Go client's (SecurityToken left out). The comparison is constant-time.
// A command in list form (ExtList) is converted to a map first ([RemotingCommand.ExtMap]).
func VerifySignature(secretKey string, cmd *RemotingCommand) bool {
	ext := cmd.ExtMap()
	got := ext[ExtSignature]
	if got == "" {
		return false
	}
	if hmac.Equal([]byte(got), []byte(Signature(secretKey, ext, cmd.Body, false))) {
		return true
	}
	if _, ok := ext[ExtSecurityToken]; ok {
		return hmac.Equal([]byte(got), []byte(Signature(secretKey, ext, cmd.Body, true)))
	}
	return false
}
