package proxyproto

import (
	"net/netip"
	"testing"
)

func TestTrustAllows(t *testing.T) {
	tr := Trust{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, c := range []struct {
		peer string
		want bool
	}{
		{"10.1.2.3", true}, {"::ffff:10.1.2.3", true}, {"11.0.0.1", false},
		{"2001:db8::7", true}, {"2001:db9::7", false}, {"127.0.0.1", false},
	} {
		if got := tr.Allows(netip.MustParseAddr(c.peer)); got != c.want {
			t.Errorf("Allows(%s) = %v, want %v", c.peer, got, c.want)
		}
	}
	var none *Trust
	if !none.Allows(netip.MustParseAddr("192.0.2.1")) || !(&Trust{}).Allows(netip.MustParseAddr("192.0.2.1")) {
		t.Error("an empty trust list must believe every peer")
	}
}
