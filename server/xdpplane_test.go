package server

import (
	"net/netip"
	"testing"

	"ballast/config"
	"ballast/director"
	"ballast/upstream"
)

// directorTestConfig has two director listeners on eth1 (tcp maglev by source, udp wlc) and an
// HTTP listener, which the director plane must leave alone.
func directorTestConfig(t *testing.T) (*config.Config, map[string]*upstream.Pool) {
	t.Helper()
	c := &config.Config{
		Listeners: []config.Listener{
			{Name: "web", Address: "127.0.0.1:0"},
			{Name: "vip", Address: "10.0.0.100:80", Protocol: "tcp", Forwarding: "tun", Interface: "eth1"},
			{Name: "dns", Address: "10.0.0.100:53", Protocol: "udp", Forwarding: "tun", Interface: "eth1"},
		},
		Pools: []config.Pool{
			{Name: "web", Backends: []config.Backend{{Address: "127.0.0.1:8081", Weight: 1}}},
			{Name: "reals", Balancer: "maglev", TableSize: 251, HashKey: config.HashKey{Source: "source_ip"}, Backends: []config.Backend{
				{Address: "10.0.0.11:80", Weight: 1}, {Address: "10.0.0.12:80", Weight: 2}, {Address: "10.0.0.13:80", Weight: 3}, {Address: "10.0.0.14:80", Weight: 4}, {Address: "10.0.0.15:80", Weight: 5},
			}},
			{Name: "dns", Balancer: "wlc", Backends: []config.Backend{{Address: "10.0.0.11:53", Weight: 1}}},
		},
		Routes: []config.Route{{Listener: "web", Pool: "web"}, {Listener: "vip", Pool: "reals"}, {Listener: "dns", Pool: "dns"}},
	}
	if err := config.Check("test", c); err != nil {
		t.Fatal(err)
	}
	pools := map[string]*upstream.Pool{}
	for _, pc := range c.Pools {
		p, err := upstream.NewPool(pc.Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[pc.Name] = p
	}
	return c, pools
}

func TestDirectorConfigFromListeners(t *testing.T) {
	c, pools := directorTestConfig(t)
	want, err := directorConfig(c, pools)
	if err != nil {
		t.Fatal(err)
	}
	w := want["eth1"]
	if len(want) != 1 || w == nil || w.mode != director.TUN || w.tableSize != 251 || len(w.vips) != 2 {
		t.Fatalf("directors %+v, want one TUN director on eth1 with table size 251 and 2 VIPs", want)
	}
	tcp, udp := w.vips[0], w.vips[1]
	if tcp.vip != (director.VIP{Addr: netip.MustParseAddr("10.0.0.100"), Port: 80, Proto: director.TCP, Scheduler: director.Maglev, SourceHash: true}) || tcp.poolName != "reals" || tcp.pool != pools["reals"] {
		t.Errorf("tcp VIP %+v (pool %s)", tcp.vip, tcp.poolName)
	}
	if udp.vip != (director.VIP{Addr: netip.MustParseAddr("10.0.0.100"), Port: 53, Proto: director.UDP, Scheduler: director.WLC}) || udp.poolName != "dns" {
		t.Errorf("udp VIP %+v (pool %s)", udp.vip, udp.poolName)
	}
	// The proxy planes never get a director listener; the director plane binds none.
	if ls := (&httpPlane{}).Listeners(c); len(ls) != 1 || ls[0].Name != "web" {
		t.Errorf("http plane takes %+v, want only web", ls)
	}
	if ls := (&xdpPlane{}).Listeners(c); len(ls) != 0 {
		t.Errorf("director plane asks for sockets: %+v", ls)
	}
}

// TestRealsFollowBackendState: the pool's runtime state becomes the director's Real: disabled,
// health-down and ejected backends are Down, draining ones weigh 0, weight overrides apply.
func TestRealsFollowBackendState(t *testing.T) {
	_, pools := directorTestConfig(t)
	p := pools["reals"]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Disable("10.0.0.11:80"))
	must(p.Drain("10.0.0.12:80"))
	must(p.SetHealthy("10.0.0.13:80", false))
	must(p.SetWeight("10.0.0.14:80", 9))
	rs, ids, states := reals(p)
	want := []director.Real{
		{Addr: netip.MustParseAddr("10.0.0.11"), Weight: 1, Down: true},
		{Addr: netip.MustParseAddr("10.0.0.12"), Weight: 0},
		{Addr: netip.MustParseAddr("10.0.0.13"), Weight: 3, Down: true},
		{Addr: netip.MustParseAddr("10.0.0.14"), Weight: 9},
		{Addr: netip.MustParseAddr("10.0.0.15"), Weight: 5},
	}
	if len(rs) != len(want) {
		t.Fatalf("reals %+v", rs)
	}
	for i := range want {
		if rs[i].Addr != want[i].Addr || rs[i].Weight != want[i].Weight || rs[i].Down != want[i].Down {
			t.Errorf("real %d: %+v, want %+v", i, rs[i], want[i])
		}
		if ids[want[i].Addr] != want[i].Addr.String()+":80" {
			t.Errorf("real %d: backend ID %q", i, ids[want[i].Addr])
		}
	}
	if states[want[2].Addr] != upstream.StateDown || states[want[0].Addr] != upstream.StateDisabled {
		t.Errorf("states %v", states)
	}
	// Every change is heard: the subscription the plane makes fires on a runtime change.
	pl := &xdpPlane{kick: make(chan struct{}, 1)}
	cancel := p.Subscribe(func(*upstream.Pool) { pl.poke() })
	defer cancel()
	must(p.Enable("10.0.0.11:80"))
	select {
	case <-pl.kick:
	default:
		t.Error("enabling a backend did not kick the director plane")
	}
}
