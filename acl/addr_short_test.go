package acl

import (
	"strings"
	"testing"
)

// TestAddressPatternShortWithoutWildcard: "10.0.0" (an address with a segment left out
// by mistake) used to match all of 10.0.0.0-255 — a white list opened to 256 hosts, or
// to 65,536 for "10.0" — while RocketMQ takes it as one exact address that matches
// nothing. A pattern with fewer than four segments must now say "*" to be a range.
func TestAddressPatternShortWithoutWildcard(t *testing.T) {
	for _, bad := range []string{"10.0.0", "10.0", "10.0.0-5", "127.0.0, 10.0.0.1"} {
		_, err := parseAddrPattern(bad)
		if err == nil || !strings.Contains(err.Error(), "*") {
			t.Errorf("%q: want an error asking for *, got %v", bad, err)
		}
		if _, err := Parse([]byte("globalWhiteRemoteAddresses: ['" + bad + "']\n")); err == nil {
			t.Errorf("plain_acl.yml with %q accepted", bad)
		}
	}
	for pat, host := range map[string]string{"10.0.*": "10.0.9.9", "10.0.0.*": "10.0.0.7", "10.*": "10.1.2.3", "10.0-1.*": "10.1.0.1"} {
		p, err := parseAddrPattern(pat)
		if err != nil || !p.match(host) {
			t.Errorf("%q: %v, matches %s = %v", pat, err, host, err == nil && p.match(host))
		}
	}
}
