// Package acl is RocketMQ plain ACL 1.0 for the Sluice broker and name server: the
// plain_acl.yml file (parsed with go.yaml.in/yaml/v3, reloaded when it changes), remote
// address patterns, signature verification and per-resource permissions, with the
// semantics of RocketMQ 4.9.8's PlainAccessValidator and PlainPermissionManager
// (docs/protocol.md §8).
//
// The broker decides which request codes need an admin account and which topics and
// groups a request touches; this package answers whether the caller may. It sits at the
// top of the module, not under broker/, because the name server checks its write
// requests with the same validator: both import it, neither reaches into the other.
package acl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Perm is a RocketMQ ACL permission (Java acl.common.Permission): bit set of DENY, ANY,
// PUB and SUB.
type Perm uint8

// Permission bits (Java Permission.DENY/ANY/PUB/SUB).
const (
	Deny Perm = 1 // refuses whatever else is set
	Any  Perm = 2 // needed-permission only: met by PUB or SUB
	Pub  Perm = 4 // send
	Sub  Perm = 8 // consume, query, offsets
)

// ParsePerm parses a permission string of plain_acl.yml: "PUB", "SUB", "PUB|SUB",
// "SUB|PUB" or "DENY" (case-insensitive, surrounding spaces ignored). Anything else,
// the empty string included, is DENY, as in RocketMQ.
func ParsePerm(s string) Perm {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "PUB":
		return Pub
	case "SUB":
		return Sub
	case "PUB|SUB", "SUB|PUB":
		return Pub | Sub
	default:
		return Deny
	}
}

// String returns the plain_acl.yml spelling of p.
func (p Perm) String() string {
	switch {
	case p&Deny != 0:
		return "DENY"
	case p&(Pub|Sub) == Pub|Sub:
		return "PUB|SUB"
	case p&Pub != 0:
		return "PUB"
	case p&Sub != 0:
		return "SUB"
	case p&Any != 0:
		return "ANY"
	}
	return "DENY"
}

// Allows reports whether owned meets needed (Java Permission.checkPermission): an owned
// DENY refuses; a needed ANY is met by PUB or SUB; otherwise a shared bit is needed.
func (owned Perm) Allows(needed Perm) bool {
	if owned&Deny != 0 {
		return false
	}
	if needed&Any != 0 {
		return owned&(Pub|Sub) != 0
	}
	return needed&owned != 0
}

// File is the content of plain_acl.yml (RocketMQ 4.9.x PlainAccessConfig layout).
type File struct {
	// GlobalWhiteRemoteAddresses are address patterns whose requests pass without
	// credentials or checks.
	GlobalWhiteRemoteAddresses []string `yaml:"globalWhiteRemoteAddresses"`
	// Accounts are the known access keys.
	Accounts []Account `yaml:"accounts"`
	// WhiteListGrantsAdmin: a white-listed address (globalWhiteRemoteAddresses, or an
	// account's whiteRemoteAddress) passes every check, admin-only request codes and
	// resource permissions included, as in RocketMQ. Set false, it only spares the
	// signature: admin codes then need a signed admin account, and an account's
	// white-listed requests still need their permissions. Absent: true (RocketMQ's
	// behaviour, so existing files keep working); write false in new files.
	WhiteListGrantsAdmin *bool `yaml:"whiteListGrantsAdmin"`
}

// Account is one entry of plain_acl.yml's accounts list.
type Account struct {
	AccessKey string `yaml:"accessKey"`
	SecretKey string `yaml:"secretKey"`
	// WhiteRemoteAddress is an address pattern whose requests under this access key pass
	// without a signature check (the permissions are not checked either, as in RocketMQ).
	WhiteRemoteAddress string `yaml:"whiteRemoteAddress"`
	// Admin allows the admin-only request codes; an admin account with no topicPerms and
	// no groupPerms passes every resource check.
	Admin bool `yaml:"admin"`
	// DefaultTopicPerm applies to topics not in TopicPerms. Absent = DENY.
	DefaultTopicPerm string `yaml:"defaultTopicPerm"`
	// DefaultGroupPerm applies to groups not in GroupPerms. Absent = DENY.
	DefaultGroupPerm string `yaml:"defaultGroupPerm"`
	// TopicPerms are "topic=PERM" entries.
	TopicPerms []string `yaml:"topicPerms"`
	// GroupPerms are "group=PERM" entries; they apply to the group's %RETRY% topic.
	GroupPerms []string `yaml:"groupPerms"`
}

// MaxFileSize is the largest plain_acl.yml accepted, in bytes (1 MiB).
const MaxFileSize = 1 << 20

// ParseError reports what is wrong in an ACL file; Field names the entry
// ("accounts[2].topicPerms[0]", ...).
type ParseError struct {
	Field  string
	Reason string
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return "acl: " + e.Reason
	}
	return "acl: " + e.Field + ": " + e.Reason
}

// ErrFileTooLarge is returned (wrapped) for an ACL file over MaxFileSize.
var ErrFileTooLarge = errors.New("acl: file too large")

// Parse decodes and checks a plain_acl.yml document: an empty file (no document, only
// comments, or a null document) is refused — a file truncated while being rewritten must
// not be read as "no accounts" — so a file without accounts says "accounts: []";
// unknown keys are refused, every
// account needs an accessKey and a secretKey (each at least 6 characters, as RocketMQ
// requires), access keys are unique, permission entries have the form name=PERM and
// address patterns parse. Errors: a *ParseError naming the entry, [ErrFileTooLarge], or
// the YAML error.
func Parse(data []byte) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFileTooLarge, len(data), MaxFileSize)
	}
	var f File
	var doc yaml.Node
	switch err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, &ParseError{Reason: "the file is empty (no YAML document); write \"accounts: []\" for a file without accounts"}
	case err != nil:
		return nil, fmt.Errorf("acl: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		return nil, &ParseError{Reason: "the document is empty; write \"accounts: []\" for a file without accounts"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	for i, p := range f.GlobalWhiteRemoteAddresses {
		if _, err := parseAddrPattern(p); err != nil {
			return nil, &ParseError{Field: fmt.Sprintf("globalWhiteRemoteAddresses[%d]", i), Reason: err.Error()}
		}
	}
	seen := map[string]bool{}
	for i, a := range f.Accounts {
		field := func(s string) string { return fmt.Sprintf("accounts[%d].%s", i, s) }
		switch {
		case len(a.AccessKey) < 6:
			return nil, &ParseError{Field: field("accessKey"), Reason: "needs at least 6 characters"}
		case len(a.SecretKey) < 6:
			return nil, &ParseError{Field: field("secretKey"), Reason: "needs at least 6 characters"}
		case seen[a.AccessKey]:
			return nil, &ParseError{Field: field("accessKey"), Reason: fmt.Sprintf("%q appears twice", a.AccessKey)}
		}
		seen[a.AccessKey] = true
		if a.WhiteRemoteAddress != "" {
			if _, err := parseAddrPattern(a.WhiteRemoteAddress); err != nil {
				return nil, &ParseError{Field: field("whiteRemoteAddress"), Reason: err.Error()}
			}
		}
		for j, e := range a.TopicPerms {
			if _, _, err := splitPerm(e); err != nil {
				return nil, &ParseError{Field: field(fmt.Sprintf("topicPerms[%d]", j)), Reason: err.Error()}
			}
		}
		for j, e := range a.GroupPerms {
			if _, _, err := splitPerm(e); err != nil {
				return nil, &ParseError{Field: field(fmt.Sprintf("groupPerms[%d]", j)), Reason: err.Error()}
			}
		}
	}
	return &f, nil
}

// splitPerm splits "name=PERM".
func splitPerm(e string) (string, Perm, error) {
	name, perm, ok := strings.Cut(e, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", 0, fmt.Errorf("%q: want name=PERM", e)
	}
	return name, ParsePerm(perm), nil
}
