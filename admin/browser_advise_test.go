package admin

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestAdvicePanelInBrowser opens the status page in headless Chromium after traffic went
// through a pool, asks for its advice with the panel's button and checks that the page shows
// the API's advice: every choice a row, the API's best first, exactly one current row, and
// the verdict.
func TestAdvicePanelInBrowser(t *testing.T) {
	exe := chromiumPath()
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	a, b := newTestBackend(t, "app-1"), newTestBackend(t, "app-2")
	s := startStack(t, "", pool("web", a, b))
	s.send(t, 300)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 120*time.Second)
	defer tcancel()

	panel := `section[data-pool="web"] .advice-panel`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(panel+` button.advise`)),
		chromedp.SetValue(chromedp.CSS(panel+` select`), "throughput"),
		chromedp.Click(chromedp.CSS(panel+` button.advise`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('`+panel+`').dataset.loaded === "true"`, chromedp.WithPollingTimeout(90*time.Second)),
	); err != nil {
		t.Fatal(err)
	}
	// The same advice from the API (served from the cache the page's request filled).
	resp, err := testHTTP.Get(s.admin + "/api/pools/web/advice?objective=throughput")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var adv struct {
		Verdict string `json:"verdict"`
		Best    struct {
			Balancer string `json:"balancer"`
		} `json:"best"`
		Choices []struct {
			Balancer string `json:"balancer"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &adv); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+panel+` table.advice tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != len(adv.Choices) {
		t.Errorf("the panel shows %d choices, the API %d", rows, len(adv.Choices))
	}
	best, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(panel+` table.advice tbody tr.best td.balancer`)))
	if err != nil {
		t.Fatal(err)
	}
	if best != adv.Best.Balancer || adv.Choices[0].Balancer != best {
		t.Errorf("the panel's best is %q, the API's %q", best, adv.Best.Balancer)
	}
	current, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+panel+` table.advice tbody tr.current').length`))
	if err != nil || current != 1 {
		t.Errorf("%d rows marked current (%v)", current, err)
	}
	verdict, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(panel+` .verdict`)))
	if err != nil || verdict != "verdict: "+adv.Verdict {
		t.Errorf("verdict %q, want %q (%v)", verdict, adv.Verdict, err)
	}
}
