package admin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"ballast/config"
	"ballast/upstream"
)

// chromiumPath finds a Chromium to drive, or "" when none is installed.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// TestStatusPageInBrowser opens the status page in headless Chromium, checks that every
// backend is shown, disables one through the page's confirm flow and checks through the API
// that its traffic stopped. BALLAST_SCREENSHOT=path saves a screenshot there (the one in
// docs/status-page.png was made so); otherwise it goes to the test's temporary directory.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	a, b, c := newTestBackend(t, "app-1"), newTestBackend(t, "app-2"), newTestBackend(t, "app-3")
	pc := pool("web", a, b, c)
	pc.Balancer = "swrr" // shows an lbstatus column
	pc.Backends[0].Weight = 2
	pc.Health = config.HealthCheck{Path: "/health", Interval: cd(500 * time.Millisecond), Timeout: cd(time.Second), Rise: 2, Fall: 2}
	s := startStack(t, "", pc)
	l := startLoad(t, s.proxy+"/")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1280, 640),
	)
	ctx := browser(t, exe, opts)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-backend="app-3"]`)),
	); err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('section[data-pool="web"] tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Fatalf("the page shows %d backends, want 3", rows)
	}
	for _, id := range []string{"app-1", "app-2", "app-3"} {
		state, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`tr[data-backend="`+id+`"] td.state`)))
		if err != nil {
			t.Fatal(err)
		}
		if state != "up" {
			t.Fatalf("%s shows state %q", id, state)
		}
	}

	// Disable app-2: the button asks for a confirmation first.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-backend="app-2"] button.disable`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-backend="app-2"] .confirmbar button.confirm`)),
	); err != nil {
		t.Fatal(err)
	}
	if st := s.pools["web"].Backend("app-2").State(); st != upstream.StateUp {
		t.Fatalf("app-2 is %v before the confirmation", st)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-backend="app-2"] .confirmbar button.confirm`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-backend="app-2"] td.state').textContent === "disabled"`, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Fatal(err)
	}

	// Through the API: app-2's request counter stands still while the others keep serving.
	requests := func() map[string]float64 {
		code, out := s.call(t, "GET", "/api/pools/web", "", nil)
		if code != 200 {
			t.Fatalf("GET pool: %d", code)
		}
		m := map[string]float64{}
		for _, b := range out["backends"].([]any) {
			bm := b.(map[string]any)
			m[bm["id"].(string)] = bm["requests"].(float64)
			if bm["id"] == "app-2" && bm["state"] != "disabled" {
				t.Fatalf("API shows app-2 %v", bm["state"])
			}
		}
		return m
	}
	before := requests()
	waitFor(t, "traffic on the others", func() bool {
		now := requests()
		return now["app-1"] > before["app-1"]+50 && now["app-3"] > before["app-3"]+25
	})
	if after := requests(); after["app-2"] != before["app-2"] {
		t.Fatalf("app-2 got %v requests after it was disabled", after["app-2"]-before["app-2"])
	}

	// Let the chart gather a few seconds of history, then take the screenshot.
	time.Sleep(4 * time.Second)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 = PNG
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("BALLAST_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "status-page.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))

	// Phone width: the page must not scroll sideways.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 800), chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	if err != nil {
		t.Fatal(err)
	}
	if overflow {
		t.Fatal("the status page scrolls sideways at 390 px")
	}
	l.stop()
}

// browser starts a headless Chromium for the test; it ends with the test.
func browser(t *testing.T, exe string, opts []chromedp.ExecAllocatorOption) context.Context {
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	return ctx
}

// TestStatusPageAsksForToken: with admin.reads: token the page shows no pool until the
// operator types a token; a wrong one is refused, the read token shows the pools.
func TestStatusPageAsksForToken(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	a := newTestBackend(t, "app-1")
	s := startStackAdmin(t, config.Admin{Address: "127.0.0.1:0", Token: testToken, ReadToken: testReadToken, Reads: config.ReadsToken}, pool("web", a))
	ctx := browser(t, exe, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("no-first-run", true)))
	asks := `document.getElementById("updated").textContent.includes("admin token")`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.Poll[chromedp.Void](asks, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-backend]').length`))
	if err != nil || rows != 0 {
		t.Fatalf("without a token the page shows %d backends (%v)", rows, err)
	}
	typeToken := func(tok string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](`(() => { const e = document.getElementById("token"); e.value = "` + tok + `"; e.dispatchEvent(new Event("change")); })()`)
	}
	if err := chromedp.Do(ctx,
		typeToken("wrong-token-0123456789"),
		chromedp.Poll[chromedp.Void](`document.getElementById("updated").textContent.includes("token refused")`, chromedp.WithPollingTimeout(20*time.Second)),
		typeToken(testReadToken),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-backend="app-1"]`)),
	); err != nil {
		t.Fatal(err)
	}
}
