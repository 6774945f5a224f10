package remoting

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"time"
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

// Ext-field names of Sluice's signature v2 (opt-in, Credentials.SignatureV2): it covers
// the request code, a timestamp the verifier holds to a skew window, and a nonce it
// refuses to see twice, so that a captured request cannot be replayed, nor replayed as
// another request code. RocketMQ clients keep signature v1.
const (
	ExtSigVersion = "SluiceSigVersion" // "2"
	ExtSigTime    = "SluiceSigTime"    // unix milliseconds when signed
	ExtSigNonce   = "SluiceSigNonce"   // 32 random hex digits
)

// Credentials are the RocketMQ plain-ACL credentials a client signs its requests with.
// Requests are signed only when both AccessKey and SecretKey are set, as the official
// clients do.
type Credentials struct {
	AccessKey     string
	SecretKey     string
	SecurityToken string // optional; sent in ext SecurityToken and signed (Java clients sign it)
	// SignatureV2 signs with Sluice's signature v2 ([SignatureV2]) instead of RocketMQ's
	// v1: only Sluice brokers and name servers verify it. Default false (v1).
	SignatureV2 bool
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
	if c.SignatureV2 {
		var nonce [16]byte
		_, _ = rand.Read(nonce[:])
		cmd.ExtFields[ExtSigVersion] = "2"
		cmd.ExtFields[ExtSigTime] = strconv.FormatInt(time.Now().UnixMilli(), 10)
		cmd.ExtFields[ExtSigNonce] = hex.EncodeToString(nonce[:])
		cmd.ExtFields[ExtSignature] = SignatureV2(c.SecretKey, cmd.Code, cmd.ExtFields, cmd.Body)
		return
	}
	delete(cmd.ExtFields, ExtSigVersion)
	cmd.ExtFields[ExtSignature] = Signature(c.SecretKey, cmd.ExtFields, cmd.Body, false)
}

// SignatureV2 computes a Sluice signature v2: HMAC-SHA256 keyed with secretKey over
// "sluice-sig-v2", the request code, and every ext field but Signature sorted by key,
// each key, value and the body preceded by its length (4 bytes, big endian), so that no
// two requests have the same content; standard Base64 with padding. The time and nonce
// are ext fields (ExtSigTime, ExtSigNonce) and so signed; the verifier checks them.
func SignatureV2(secretKey string, code int16, ext map[string]string, body []byte) string {
	keys := make([]string, 0, len(ext))
	for k := range ext {
		if k != ExtSignature {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	mac := hmac.New(sha256.New, []byte(secretKey))
	var n [4]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		mac.Write(n[:])
		mac.Write(b)
	}
	put([]byte("sluice-sig-v2"))
	put([]byte(strconv.Itoa(int(code))))
	for _, k := range keys {
		put([]byte(k))
		put([]byte(ext[k]))
	}
	put(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// VerifySignatureV2 reports whether cmd carries a signature v2 ([SignatureV2]) made with
// secretKey (constant-time). It checks neither the time nor the nonce: the caller does.
func VerifySignatureV2(secretKey string, cmd *RemotingCommand) bool {
	ext := cmd.ExtMap()
	got := ext[ExtSignature]
	return got != "" && ext[ExtSigVersion] == "2" &&
		hmac.Equal([]byte(got), []byte(SignatureV2(secretKey, cmd.Code, ext, cmd.Body)))
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
