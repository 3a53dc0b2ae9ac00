package realserver

import (
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func TestSetupRefusesBadOptions(t *testing.T) {
	vip := []netip.Addr{netip.MustParseAddr("10.9.9.1")}
	for _, tc := range []struct {
		o   Options
		msg string
	}{
		{Options{Mode: DR}, "no VIP"},
		{Options{VIPs: vip, Mode: "nat"}, `mode "nat"`},
		{Options{VIPs: []netip.Addr{netip.MustParseAddr("fd00::1")}, Mode: DR}, "only IPv4"},
		{Options{VIPs: vip, Mode: TUN}, "needs the interface"},
	} {
		if _, err := Setup(tc.o); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want one saying %q", tc.o, err, tc.msg)
		}
	}
}

// TestSetupFailureChangesNothing: a Setup that fails (here: no such interface) leaves the
// namespace as it found it.
func TestSetupFailureChangesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, _ := netns.Get()
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(orig)

	_, err = Setup(Options{VIPs: []netip.Addr{netip.MustParseAddr("10.9.9.1")}, Mode: TUN, Iface: "nope0"})
	if err == nil || !strings.Contains(err.Error(), `interface "nope0"`) {
		t.Fatalf("error %v, want one naming the interface", err)
	}
	lo, _ := netlink.LinkByName("lo")
	if addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4); len(addrs) != 0 {
		t.Errorf("lo holds %v after a failed Setup", addrs)
	}
	for _, s := range []string{"arp_ignore", "arp_announce"} {
		b, _ := os.ReadFile("/proc/sys/net/ipv4/conf/all/" + s)
		if strings.TrimSpace(string(b)) != "0" {
			t.Errorf("all/%s = %s after a failed Setup", s, b)
		}
	}
}
