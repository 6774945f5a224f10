package addrkey

import "testing"

func TestOf(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:10911":              "127.0.0.1",
		"10.1.2.3":                     "10.1.2.3",
		"[::ffff:10.1.2.3]:80":         "10.1.2.3",
		"[2001:db8:1:2::1]:80":         "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:1:2:3]:81": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:80":         "2001:db8:1:3::/64",
		"[fe80::1%eth0]:80":            "fe80::/64",
		"[::1]:9876":                   "::/64",
		"not an address":               "not an address",
		"host.example:80":              "host.example",
	} {
		if got := Of(in); got != want {
			t.Errorf("Of(%q) = %q, want %q", in, got, want)
		}
	}
	if Of("[2001:db8:1:2::1]:1") == Of("[2001:db8:1:3::1]:1") {
		t.Fatal("two /64s share a key")
	}
}
