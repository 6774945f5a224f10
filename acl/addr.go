package acl

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// addrPattern matches remote addresses (RocketMQ RemoteAddressStrategyFactory forms):
//
//   - "*" or "*.*.*.*" (or the IPv6 "*:*:*:*:*:*:*:*"): every address;
//   - an exact address "192.168.0.1" or "::1";
//   - "192.168.0.{1,2,3}": several hosts of one prefix;
//   - per-segment IPv4 ranges: "192.168.1.1-100", "192.168.*" / "192.168.*.*" (missing
//     trailing segments are "*"; a pattern with fewer than four segments must contain a
//     "*", so that "10.0.0", a mistyped address, is refused rather than a range);
//   - comma-separated lists of any of the above.
type addrPattern struct {
	all   bool
	exact map[netip.Addr]bool
	v4    [][4][2]int // per-segment inclusive ranges
}

func parseAddrPattern(s string) (*addrPattern, error) {
	p := &addrPattern{exact: map[netip.Addr]bool{}}
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty address pattern")
	}
	var parts []string
	if i := strings.Index(s, "{"); i >= 0 {
		j := strings.Index(s, "}")
		if j < i || j != len(s)-1 {
			return nil, fmt.Errorf("address pattern %q: want prefix{a,b,...}", s)
		}
		for _, h := range strings.Split(s[i+1:j], ",") {
			parts = append(parts, s[:i]+strings.TrimSpace(h))
		}
	} else {
		parts = strings.Split(s, ",")
	}
	for _, part := range parts {
		part = strings.TrimSpace(part)
		switch part {
		case "*", "*.*.*.*", "*:*:*:*:*:*:*:*":
			p.all = true
			continue
		}
		if a, err := netip.ParseAddr(part); err == nil {
			p.exact[a.Unmap()] = true
			continue
		}
		segs := strings.Split(part, ".")
		if len(segs) > 4 || len(segs) < 2 {
			return nil, fmt.Errorf("address pattern %q: not an address, range or list", part)
		}
		if len(segs) < 4 && !slices.Contains(segs, "*") {
			// "10.0.0" is most likely an address with a segment left out; RocketMQ takes it
			// as one exact address (matching nothing), a range here would open the list
			// to 256 hosts or more.
			return nil, fmt.Errorf("address pattern %q: %d segments and no *: write a full address, or end with .* for a range", part, len(segs))
		}
		var r [4][2]int
		for k := range 4 {
			r[k] = [2]int{0, 255}
			if k >= len(segs) || segs[k] == "*" {
				continue
			}
			lo, hi, ok := strings.Cut(segs[k], "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if ok {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b > 255 || a > b {
				return nil, fmt.Errorf("address pattern %q: segment %q is not n, a-b or *", part, segs[k])
			}
			r[k] = [2]int{a, b}
		}
		p.v4 = append(p.v4, r)
	}
	return p, nil
}

// match reports whether host (an IP address without port) matches the pattern.
func (p *addrPattern) match(host string) bool {
	if p == nil {
		return false
	}
	if p.all {
		return true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	if p.exact[a] {
		return true
	}
	if !a.Is4() {
		return false
	}
	b := a.As4()
next:
	for _, r := range p.v4 {
		for k := range 4 {
			if int(b[k]) < r[k][0] || int(b[k]) > r[k][1] {
				continue next
			}
		}
		return true
	}
	return false
}
