package admin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ballast/discovery"
	"ballast/upstream"
)

// fakeFleet records the changes the API writes to the fleet.
type fakeFleet struct {
	mu      sync.Mutex
	changes []FleetChange
	err     error
	view    FleetView
}

func (f *fakeFleet) FleetStatus() FleetView { f.mu.Lock(); defer f.mu.Unlock(); return f.view }

func (f *fakeFleet) Change(_ context.Context, c FleetChange) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, f.err
	}
	f.changes = append(f.changes, c)
	return int64(100 + len(f.changes)), nil
}

type fakeDiscovery []discovery.Status

func (d fakeDiscovery) Discovery() []discovery.Status { return d }

// TestFleetChangeAPI: ?fleet=1 writes the change to the fleet instead of applying it here; a
// backend unknown here is refused before anything is written; an etcd failure is a 503; a node
// without a fleet says so.
func TestFleetChangeAPI(t *testing.T) {
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	s := startStack(t, "", pool("web", a, b))
	if code, out := s.call(t, "POST", "/api/pools/web/backends/a/drain?fleet=1", "", nil); code != 400 || !strings.Contains(out["error"].(string), "no fleet") {
		t.Errorf("without a fleet: %d %v", code, out)
	}
	f := &fakeFleet{view: FleetView{Prefix: "/ballast/t", Connected: true, Revision: 7}}
	s.plane.ShowFleet(f)
	code, out := s.call(t, "POST", "/api/pools/web/backends/a/drain?fleet=1", "", nil)
	if code != 200 || out["change"] != "fleet drain a" || out["revision"].(float64) != 101 {
		t.Errorf("fleet drain: %d %v", code, out)
	}
	if st := s.pools["web"].Backend("a").State(); st != upstream.StateUp {
		t.Errorf("the node applied the fleet change itself (%s): it must come from the watch", st)
	}
	if code, out := s.call(t, "POST", "/api/pools/web/backends/b/weight?fleet=1", "", map[string]any{"weight": 4}); code != 200 || out["change"] != "fleet weight b 4" {
		t.Errorf("fleet weight: %d %v", code, out)
	}
	if code, _ := s.call(t, "POST", "/api/pools/web/backends/b/weight?fleet=1", "", map[string]any{"weight": 20000}); code != 400 {
		t.Errorf("a weight out of range: %d", code)
	}
	if code, _ := s.call(t, "POST", "/api/pools/web/backends/nosuch/drain?fleet=1", "", nil); code != 404 {
		t.Errorf("unknown backend: %d", code)
	}
	if code, out := s.call(t, "POST", "/api/pools/web/backends?fleet=1", "", map[string]any{"address": "127.0.0.1:9", "name": "n"}); code != 200 || out["change"] != "fleet add n" {
		t.Errorf("fleet add: %d %v", code, out)
	}
	f.mu.Lock()
	got := f.changes
	f.mu.Unlock()
	if len(got) != 3 || got[0].Action != "drain" || got[0].Backend != "a" || got[1].Action != "weight" || *got[1].Weight != 4 || got[2].Action != "add" || got[2].Add.Address != "127.0.0.1:9" {
		t.Errorf("changes written %+v", got)
	}
	f.mu.Lock()
	f.err = errors.New("etcd down")
	f.mu.Unlock()
	if code, out := s.call(t, "POST", "/api/pools/web/backends/a/enable?fleet=1", "", nil); code != 503 || !strings.Contains(out["error"].(string), "etcd down") {
		t.Errorf("etcd failing: %d %v", code, out)
	}
	code, out = s.call(t, "GET", "/api/pools", "", nil)
	if fl, ok := out["fleet"].(map[string]any); code != 200 || !ok || fl["revision"].(float64) != 7 {
		t.Errorf("GET /api/pools fleet: %d %v", code, out["fleet"])
	}
}

// TestDiscoveryInStatusPage: a stale discovered set and a node cut off from etcd are said on the
// status page, in words, with since when.
func TestDiscoveryInStatusPage(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	a := newTestBackend(t, "a")
	s := startStack(t, "", pool("web", a))
	since := time.Now().Add(-time.Minute)
	s.plane.ShowDiscovery(fakeDiscovery{{Pool: "web", Source: "dns srv _http._tcp.web.test.", Backends: 3, Stale: true, StaleSince: since, LastError: "resolver 127.0.0.1:53 answered NXDOMAIN"}})
	s.plane.ShowFleet(&fakeFleet{view: FleetView{Prefix: "/ballast/prod", Endpoints: []string{"127.0.0.1:2379"}, Since: since, LastError: "etcd did not answer"}})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.Flag("headless", true),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#discovery p[data-pool="web"]`)),
	); err != nil {
		t.Fatal(err)
	}
	disc, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#discovery p[data-pool="web"]`)))
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#fleet`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(disc, "STALE since") || !strings.Contains(disc, "NXDOMAIN") || !strings.Contains(disc, "keeping the last good set") {
		t.Errorf("discovery on the page: %q", disc)
	}
	if !strings.Contains(fleet, "DISCONNECTED since") || !strings.Contains(fleet, "serving its last view") {
		t.Errorf("fleet on the page: %q", fleet)
	}
}
