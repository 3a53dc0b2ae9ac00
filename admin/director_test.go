package admin

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

type fakeDirectors []DirectorView

func (f fakeDirectors) Directors() []DirectorView { return f }

// TestDirectorsShown: the plane's directors reach the JSON status (what ctl status --json
// prints), the text of ctl status and /metrics, figure by figure.
func TestDirectorsShown(t *testing.T) {
	d := fakeDirectors{{
		Interface: "eth1", Mode: "dr", Counters: map[string]uint64{"pass_not_vip": 7},
		VIPs: []VIPView{{
			Listener: "vip", Pool: "reals", VIP: "10.0.0.100:80/tcp", Scheduler: "maglev",
			DirectorTraffic: DirectorTraffic{Packets: 300, Bytes: 45000, NewFlows: 30, ActiveFlows: 4},
			Reals: []RealView{
				{Backend: "a", Address: "10.0.0.11:80", State: "up", Weight: 2, Slots: 170, DirectorTraffic: DirectorTraffic{Packets: 200, Bytes: 30000, NewFlows: 20, ActiveFlows: 3}},
				{Backend: "b", Address: "10.0.0.12:80", State: "disabled", Weight: 1, DirectorTraffic: DirectorTraffic{Packets: 100, Bytes: 15000, NewFlows: 10, ActiveFlows: 1}},
			},
		}},
	}}
	p := New(nil)
	p.ShowDirectors(d)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	r, err := NewClient(srv.URL, "").Pools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Directors) != 1 || len(r.Directors[0].VIPs) != 1 || len(r.Directors[0].VIPs[0].Reals) != 2 {
		t.Fatalf("status directors %+v", r.Directors)
	}
	if got := r.Directors[0].VIPs[0].Reals[0]; got != d[0].VIPs[0].Reals[0] {
		t.Errorf("real a in the JSON: %+v, want %+v", got, d[0].VIPs[0].Reals[0])
	}

	var text bytes.Buffer
	if err := WriteStatus(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"director eth1 (dr)",
		"vip 10.0.0.100:80/tcp  listener vip  pool reals (maglev)  packets 300  bytes 45000  new flows 30  active 4  drops 0",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("ctl status lacks %q:\n%s", want, text.String())
		}
	}
	if !hasFields(text.String(), "a", "10.0.0.11:80", "up", "2", "170", "200", "30000", "20", "3") {
		t.Errorf("ctl status has no row for real a:\n%s", text.String())
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	labels := `{backend="b",interface="eth1",listener="vip",pool="reals",vip="10.0.0.100:80/tcp"}`
	for _, want := range []string{
		`ballast_director_vip_new_flows_total{interface="eth1",listener="vip",vip="10.0.0.100:80/tcp"} 30`,
		`ballast_director_vip_active_flows{interface="eth1",listener="vip",vip="10.0.0.100:80/tcp"} 4`,
		"ballast_director_real_packets_total" + labels + " 100",
		"ballast_director_real_bytes_total" + labels + " 15000",
		"ballast_director_real_new_flows_total" + labels + " 10",
		"ballast_director_real_up" + labels + " 0",
		`ballast_director_packets_total{interface="eth1",reason="pass_not_vip"} 7`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// hasFields reports whether some line of s has exactly these whitespace-separated fields.
func hasFields(s string, fields ...string) bool {
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(line)
		if len(f) == len(fields) {
			match := true
			for i := range f {
				match = match && f[i] == fields[i]
			}
			if match {
				return true
			}
		}
	}
	return false
}

// TestDirectorsOnStatusPage: the status page, in headless Chromium, lists each director's VIP
// with one row per real server and its figures.
func TestDirectorsOnStatusPage(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	p := New(nil)
	p.ShowDirectors(fakeDirectors{{Interface: "eth1", Mode: "tun", VIPs: []VIPView{{
		Listener: "vip", Pool: "reals", VIP: "10.0.0.100:80/tcp", Scheduler: "wlc",
		Reals: []RealView{
			{Backend: "a", State: "up", Weight: 10, Slots: 32768, DirectorTraffic: DirectorTraffic{Packets: 200, Bytes: 30000, NewFlows: 20, ActiveFlows: 3}},
			{Backend: "b", State: "down", Weight: 10, DirectorTraffic: DirectorTraffic{Packets: 100, Bytes: 15000, NewFlows: 10}},
		},
	}}}})
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
		chromedp.WaitVisible(chromedp.CSS(`#directors tr[data-real="b"]`)),
	); err != nil {
		t.Fatal(err)
	}
	heading, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#directors h2`)))
	if err != nil {
		t.Fatal(err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#directors tr[data-real="a"] td')].map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if heading != "XDP director on eth1 (tun)" {
		t.Errorf("heading %q", heading)
	}
	if want := []string{"a", "up", "10", "32768", "200", "30000", "20", "3"}; !slices.Equal(cells, want) {
		t.Errorf("row of real a: %q, want %q", cells, want)
	}
}
