package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ballast/bgp"
)

type fakeBGP struct{ v atomic.Pointer[BGPView] }

func (f *fakeBGP) BGPStatus() *BGPView { return f.v.Load() }

func testBGPView() *BGPView {
	since := time.Now().Add(-90 * time.Second)
	return &BGPView{
		Status: bgp.Status{
			ASN: 65010, RouterID: "10.77.0.2", Announced: 1, Announces: 3, Withdrawals: 2,
			Sessions: []bgp.Session{{Peer: "10.77.0.254", ASN: 65000, State: "established", Since: since, Uptime: "1m30s",
				PrefixesSent: 1, UpdatesSent: 5, UpdatesReceived: 2, HoldTime: 9, BFD: "up", BFDSent: 900, BFDReceived: 899}},
			Routes: []bgp.Route{
				{Prefix: netip.MustParsePrefix("10.77.1.100/32"), Announce: true, Reason: "listener web: pool web has 3 usable real servers"},
				{Prefix: netip.MustParsePrefix("10.77.1.101/32"), Reason: "withdrawn: listener api: pool api has no usable real server"},
			},
		},
		WithdrawWait: "2s", BFDTimers: "100ms × 3", ClusterSeed: 7,
		FlowSync: &HAFlowSync{Port: 8848, Sending: true, FlowsSent: 40, DatagramsSent: 4, FlowsReceived: 80, FlowsInstalled: 80},
	}
}

// TestBGPShown: the plane's BGP view reaches GET /api/bgp (ctl bgp --json), GET /api/pools
// (the page), the text of ctl bgp and the ballast_bgp_* series; without bgp, /api/bgp is 404.
func TestBGPShown(t *testing.T) {
	f := &fakeBGP{}
	p := New(nil)
	p.ShowBGP(f)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	c := NewClient(srv.URL, "")
	if _, err := c.BGP(context.Background()); err == nil || !strings.Contains(err.Error(), "no bgp") {
		t.Errorf("GET /api/bgp without bgp: %v, want a 404", err)
	}
	f.v.Store(testBGPView())
	resp, err := http.Get(srv.URL + "/api/bgp")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if raw["asn"] != float64(65010) || raw["router_id"] != "10.77.0.2" || raw["cluster_seed"] != float64(7) {
		t.Errorf("GET /api/bgp: %v", raw)
	}
	v, err := c.BGP(context.Background())
	if err != nil || len(v.Sessions) != 1 || v.Sessions[0].PrefixesSent != 1 || len(v.Routes) != 2 || v.Routes[1].Announce {
		t.Fatalf("client: %+v %v", v, err)
	}
	if r, err := c.Pools(context.Background()); err != nil || r.BGP == nil || r.BGP.ASN != 65010 {
		t.Errorf("GET /api/pools has bgp %+v (%v)", r.BGP, err)
	}
	var text bytes.Buffer
	WriteBGP(&text, v)
	for _, want := range []string{
		"speaker  AS 65010, router ID 10.77.0.2, announcing; BFD 100ms × 3; cluster seed 7",
		"routes   1 announced; 3 announcements, 2 withdrawals so far",
		"10.77.0.254  65000  established  1m30s   1     0         5/2",
		"up (900 sent, 899 received, 0 failures)",
		"10.77.1.100/32  true       listener web: pool web has 3 usable real servers",
		"10.77.1.101/32  false      withdrawn: listener api: pool api has no usable real server",
		"flow sync  port 8848: 40 flows sent in 4 datagrams, 0 dropped; 80 received, 80 installed",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("ctl bgp lacks %q:\n%s", want, text.String())
		}
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ballast_bgp_session_established{peer="10.77.0.254"} 1`, `ballast_bgp_prefixes_sent{peer="10.77.0.254"} 1`,
		`ballast_bgp_bfd_up{peer="10.77.0.254"} 1`, `ballast_bgp_updates_sent_total{peer="10.77.0.254"} 5`,
		`ballast_bgp_route_announced{prefix="10.77.1.100/32"} 1`, `ballast_bgp_route_announced{prefix="10.77.1.101/32"} 0`,
		"ballast_bgp_announcements_total 3", "ballast_bgp_withdrawals_total 2", "ballast_bgp_draining 0",
		"ballast_bgp_flow_sync_installed_total 80",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(string(body), `ballast_bgp_session_uptime_seconds{peer="10.77.0.254"} 9`) {
		t.Errorf("/metrics: uptime of a session up 90 s not shown")
	}
}

// TestBGPOnStatusPage: the status page, in headless Chromium, shows the BGP panel (sessions,
// routes with their reasons) and follows a drain.
func TestBGPOnStatusPage(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	f := &fakeBGP{}
	f.v.Store(testBGPView())
	p := New(nil)
	p.ShowBGP(f)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.Flag("headless", true),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("no-first-run", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#bgp tr[data-peer="10.77.0.254"]`)),
	); err != nil {
		t.Fatal(err)
	}
	row, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#bgp tr[data-peer="10.77.0.254"]`)))
	if err != nil || !strings.Contains(row, "established") || !strings.Contains(row, "1m30s") || !strings.Contains(row, "up") {
		t.Errorf("session row %q (%v)", row, err)
	}
	why, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#bgp tr[data-prefix="10.77.1.101/32"]`)))
	if err != nil || !strings.Contains(why, "no usable real server") || !strings.Contains(why, "no") {
		t.Errorf("withdrawn route row %q (%v)", why, err)
	}
	state, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#bgp-state`)))
	if err != nil || state != "1 announced" {
		t.Errorf("state %q (%v)", state, err)
	}
	v := testBGPView()
	v.Draining = true
	v.Routes[0].Announce, v.Routes[0].Reason = false, "withdrawn: the director is stopping"
	f.v.Store(v)
	if err := chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`document.getElementById("bgp-state").textContent === "draining" && document.querySelector('#bgp tr[data-prefix="10.77.1.100/32"]').dataset.announced === "false"`, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Errorf("the page did not follow the drain: %v", err)
	}
}
