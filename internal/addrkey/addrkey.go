// Package addrkey groups remote addresses the way per-address limits count them: an
// IPv4 address on its own, an IPv6 address by its /64 prefix (one host or site usually
// holds a whole /64, so counting single IPv6 addresses would let one client take
// 2^64 shares).
package addrkey

import (
	"net"
	"net/netip"
)

// Of returns the key of remote, given as "ip:port", "[ipv6]:port" or a bare IP: the IPv4
// address (an IPv4-mapped IPv6 address counts as IPv4), or the IPv6 /64 prefix such as
// "2001:db8:1:2::/64". An address that does not parse is its own key.
func Of(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return ip.String()
	}
	return p.String()
}
