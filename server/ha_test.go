package server

import (
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// TestHAFixedChanged: a reload may change the priority and the addresses; every other ha key
// needs a restart and is named.
func TestHAFixedChanged(t *testing.T) {
	base := config.HA{Interface: "eth0", VirtualRouterID: 51, Priority: 150, AdvertInterval: config.Duration{Duration: time.Second},
		Preempt: true, UnicastPeers: []string{"10.0.0.3"}, Addresses: []string{"10.0.0.1"}, TrackPools: true,
		Checksum: "pseudo-header", FlowSync: true, FlowSyncPort: 8848}
	for _, c := range []struct {
		change func(*config.HA)
		want   string
	}{
		{func(h *config.HA) { h.Priority = 200 }, ""},
		{func(h *config.HA) { h.Addresses = []string{"10.0.0.2"} }, ""},
		{func(h *config.HA) { h.TrackPools = false }, ""},
		{func(h *config.HA) { h.Interface = "eth1" }, "ha.interface"},
		{func(h *config.HA) { h.VirtualRouterID = 52 }, "ha.virtual_router_id"},
		{func(h *config.HA) { h.AdvertInterval.Duration = 100 * time.Millisecond }, "ha.advert_interval"},
		{func(h *config.HA) { h.Preempt = false }, "ha.preempt"},
		{func(h *config.HA) { h.PreemptDelay.Duration = time.Second }, "ha.preempt"},
		{func(h *config.HA) { h.UnicastPeers = nil }, "ha.unicast_peers"},
		{func(h *config.HA) { h.Checksum = "message-only" }, "ha.checksum"},
		{func(h *config.HA) { h.FlowSyncPort = 9000 }, "ha.flow_sync"},
		{func(h *config.HA) { h.FlowSync = false }, "ha.flow_sync"},
	} {
		b := base
		b.UnicastPeers = append([]string(nil), base.UnicastPeers...)
		c.change(&b)
		if got := haFixedChanged(&base, &b); got != c.want {
			t.Errorf("%+v: %q, want %q", b, got, c.want)
		}
	}
}

// TestTrackedListeners: the listeners whose address moves are tracked with every pool routed
// from them; the others are not. A listener is unusable only when none of its pools has a
// backend up.
func TestTrackedListeners(t *testing.T) {
	cfg := &config.Config{
		Listeners: []config.Listener{
			{Name: "web", Address: "10.0.0.100:80", Protocol: "tcp", Forwarding: "dr", Interface: "eth0"},
			{Name: "site", Address: "10.0.0.101:80"},
			{Name: "local", Address: "127.0.0.1:8080"},
		},
		Pools: []config.Pool{
			{Name: "reals", Backends: []config.Backend{{Address: "10.0.0.11:80", Weight: 1}}},
			{Name: "app", Backends: []config.Backend{{Address: "10.0.0.21:80", Weight: 1}}},
			{Name: "app2", Backends: []config.Backend{{Address: "10.0.0.22:80", Weight: 1}}},
		},
		Routes: []config.Route{{Listener: "web", Pool: "reals"}, {Listener: "site", Host: "a", Pool: "app"}, {Listener: "site", Pool: "app2"}, {Listener: "local", Pool: "app"}},
		HA:     &config.HA{Interface: "eth0", VirtualRouterID: 1, Priority: 100},
	}
	if err := config.Check("test", cfg); err != nil {
		t.Fatal(err)
	}
	pools := map[string]*upstream.Pool{}
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc.Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools[pc.Name] = p
	}
	local, answer := cfg.HAAddresses()
	got := trackedListeners(cfg, pools, local, answer)
	if len(got) != 2 || got[0].name != "web" || len(got[0].pools) != 1 || got[1].name != "site" || len(got[1].pools) != 2 {
		t.Fatalf("tracked %+v, want web (1 pool) and site (2 pools)", got)
	}
	if !anyUsable(got[1].pools) {
		t.Error("site unusable with its backends up")
	}
	if err := pools["app"].Disable("10.0.0.21:80"); err != nil {
		t.Fatal(err)
	}
	if !anyUsable(got[1].pools) {
		t.Error("site unusable with pool app2 still up")
	}
	for p, b := range map[string]string{"app2": "10.0.0.22:80", "reals": "10.0.0.11:80"} {
		if err := pools[p].Disable(b); err != nil {
			t.Fatal(err)
		}
	}
	if anyUsable(got[1].pools) || anyUsable(got[0].pools) {
		t.Error("usable with every backend disabled")
	}
}
