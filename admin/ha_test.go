package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

type fakeHA struct{ v atomic.Pointer[HAView] }

func (f *fakeHA) HAStatus() *HAView { return f.v.Load() }

func testHAView() *HAView {
	return &HAView{
		State: "backup", Priority: 100, ConfiguredPriority: 100, Master: "10.0.0.2", MasterPriority: 150,
		Interface: "eth0", VRID: 51, Address: "10.0.0.3", AdvertInterval: "100ms", MasterAdvertInterval: "100ms",
		Preempt: true, Addresses: []string{"10.0.0.100", "10.0.0.101"}, Since: time.Unix(1800000000, 0).UTC(),
		AdvertsSent: 3, AdvertsReceived: 1234, Transitions: 2, BecameMaster: 1,
		Errors: map[string]uint64{"checksum": 2, "ttl": 0}, ARPAnswered: 9,
		FlowSync: &HAFlowSync{Port: 8848, Group: "224.0.0.81", FlowsReceived: 50, FlowsInstalled: 48, UnknownReal: 2},
	}
}

// TestHAShown: the plane's HA view reaches GET /api/ha (ctl ha --json), GET /api/pools (the
// page), the text of ctl ha and /metrics; without ha, /api/ha is 404.
func TestHAShown(t *testing.T) {
	f := &fakeHA{}
	p := New(nil)
	p.ShowHA(f)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	c := NewClient(srv.URL, "")
	if _, err := c.HA(context.Background()); err == nil || !strings.Contains(err.Error(), "404") && !strings.Contains(err.Error(), "no ha") {
		t.Errorf("GET /api/ha without ha: %v, want a 404", err)
	}
	f.v.Store(testHAView())

	resp, err := http.Get(srv.URL + "/api/ha")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if raw["state"] != "backup" || raw["priority"] != float64(100) || raw["master"] != "10.0.0.2" {
		t.Errorf("GET /api/ha: %v", raw)
	}
	v, err := c.HA(context.Background())
	if err != nil || v.AdvertsReceived != 1234 || v.FlowSync == nil || v.FlowSync.FlowsInstalled != 48 {
		t.Fatalf("client: %+v %v", v, err)
	}
	r, err := c.Pools(context.Background())
	if err != nil || r.HA == nil || r.HA.State != "backup" {
		t.Errorf("GET /api/pools has ha %+v (%v)", r.HA, err)
	}

	var text bytes.Buffer
	WriteHA(&text, v)
	for _, want := range []string{
		"state          backup since 2027-01-15T08:00:00Z",
		"priority       100 (configured 100)",
		"master         10.0.0.2 (priority 150, interval 100ms)",
		"router         VRID 51 on eth0 from 10.0.0.3, advert interval 100ms, preempt true",
		"peers          multicast 224.0.0.18",
		"addresses      10.0.0.100, 10.0.0.101",
		"adverts        3 sent, 1234 received",
		"advert errors  checksum 2",
		"flow sync      224.0.0.81:8848, sending false: 0 flows sent in 0 datagrams, 0 dropped; 50 received, 48 installed (0 unknown VIP, 2 unknown real)",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("ctl ha lacks %q:\n%s", want, text.String())
		}
	}

	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ballast_ha_state{state="backup"} 1`, `ballast_ha_state{state="master"} 0`, `ballast_ha_state{state="fault"} 0`,
		"ballast_ha_priority 100", "ballast_ha_master_priority 150", "ballast_ha_adverts_received_total 1234",
		`ballast_ha_advert_errors_total{reason="checksum"} 2`, "ballast_ha_transitions_total 2", "ballast_ha_became_master_total 1",
		"ballast_ha_arp_answered_total 9", "ballast_ha_flow_sync_installed_total 48",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHAOnStatusPage: the status page, in headless Chromium, shows the HA panel and follows a
// change of state.
func TestHAOnStatusPage(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	f := &fakeHA{}
	f.v.Store(testHAView())
	p := New(nil)
	p.ShowHA(f)
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
		chromedp.WaitVisible(chromedp.CSS(`#ha tr[data-key="master"]`)),
	); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#ha-state`)))
	if err != nil || state != "backup" {
		t.Errorf("state %q (%v)", state, err)
	}
	master, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#ha tr[data-key="master"] td`)))
	if err != nil || master != "10.0.0.2 (priority 150, interval 100ms)" {
		t.Errorf("master row %q (%v)", master, err)
	}
	v := testHAView()
	v.State, v.Master, v.Priority = "master", "10.0.0.3", 100
	f.v.Store(v)
	if err := chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](`document.getElementById("ha-state").textContent === "master"`, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Errorf("the page did not follow the change to master: %v", err)
	}
}
