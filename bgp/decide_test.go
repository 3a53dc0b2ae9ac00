package bgp

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	a := netip.MustParseAddr("10.77.1.100")
	b := netip.MustParseAddr("10.77.1.101")
	web := VIP{Addr: a, Listener: "web", Pool: "web", Usable: 3, Attached: true}
	dns := VIP{Addr: a, Listener: "dns", Pool: "dns", Usable: 1, Attached: true}
	api := VIP{Addr: b, Listener: "api", Pool: "api", Usable: 2, Attached: true}
	none := func(v VIP) VIP { v.Usable = 0; return v }
	detached := func(v VIP) VIP { v.Attached = false; return v }
	cases := []struct {
		name     string
		vips     []VIP
		draining bool
		want     map[netip.Addr]bool
		reason   map[netip.Addr]string
	}{
		{"all usable", []VIP{web, dns, api}, false, map[netip.Addr]bool{a: true, b: true},
			map[netip.Addr]string{a: "listener web: pool web has 3 usable real servers; listener dns: pool dns has 1 usable real server"}},
		{"draining withdraws all", []VIP{web, api}, true, map[netip.Addr]bool{a: false, b: false},
			map[netip.Addr]string{a: "withdrawn: the director is stopping"}},
		{"no usable real server", []VIP{web, none(api)}, false, map[netip.Addr]bool{a: true, b: false},
			map[netip.Addr]string{b: "withdrawn: listener api: pool api has no usable real server"}},
		{"one listener of an address has one", []VIP{none(web), dns}, false, map[netip.Addr]bool{a: true},
			map[netip.Addr]string{a: "listener dns: pool dns has 1 usable real server (listener web: pool web has no usable real server)"}},
		{"not attached", []VIP{detached(web), api}, false, map[netip.Addr]bool{a: false, b: true},
			map[netip.Addr]string{a: "withdrawn: listener web is not served by a director"}},
		{"nothing", nil, false, map[netip.Addr]bool{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(c.vips, c.draining)
			if len(got) != len(c.want) {
				t.Fatalf("got %d routes %v, want %d", len(got), got, len(c.want))
			}
			for i, r := range got {
				if i > 0 && got[i-1].Prefix.Addr().Compare(r.Prefix.Addr()) >= 0 {
					t.Errorf("routes not sorted: %v", got)
				}
				if r.Prefix.Bits() != 32 {
					t.Errorf("%v: want a host route", r.Prefix)
				}
				if want, ok := c.want[r.Prefix.Addr()]; !ok || want != r.Announce {
					t.Errorf("%v: announced %v, want %v (%s)", r.Prefix, r.Announce, want, r.Reason)
				}
				if want := c.reason[r.Prefix.Addr()]; want != "" && !strings.Contains(r.Reason, want) {
					t.Errorf("%v: reason %q, want %q", r.Prefix, r.Reason, want)
				}
			}
		})
	}
}

// TestBIRDConfig: the BIRD 2 configuration docs/scale-out.md offers as the alternative to FRR
// parses (bird -p), when BIRD is installed.
func TestBIRDConfig(t *testing.T) {
	bird, err := exec.LookPath("bird")
	if err != nil {
		t.Skip("skipping: BIRD 2 is not installed (apt-get install bird2)")
	}
	if out, err := exec.Command(bird, "-p", "-c", "../docs/bird-scale-out.conf").CombinedOutput(); err != nil {
		t.Fatalf("bird -p: %v\n%s", err, out)
	}
}
