package server

import (
	"ballast/internal/peertest"
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// greeted dials a tcp listener and returns the connection and the backend's name.
func greeted(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	name, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("greeting through %s: %v", addr, err)
	}
	return c, strings.TrimSpace(name)
}

// udpName sends a datagram from a new socket and returns the answer, retrying a few times.
func udpName(t *testing.T, addr string) string {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", addr)
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for range 10 {
		c.Write([]byte("q"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil {
			name, _, _ := strings.Cut(string(buf[:n]), ":")
			return name
		}
	}
	t.Fatalf("no answer through %s", addr)
	return ""
}

// TestL4PlaneReload: a reload moves a udp listener to another pool for new flows, removes a
// tcp listener (it stops accepting, its established connection keeps flowing) and adds one;
// Shutdown then waits for the connection left open on the removed listener.
func TestL4PlaneReload(t *testing.T) {
	ta, tb := peertest.TCPGreeter(t, "ta"), peertest.TCPGreeter(t, "tb")
	u1, u2 := peertest.UDPNamer(t, "u1"), peertest.UDPNamer(t, "u2")
	yaml := `
listeners:
  - {name: %s, address: "127.0.0.1:0", protocol: tcp}
  - {name: dns, address: "127.0.0.1:0", protocol: udp}
pools:
  - {name: t, backends: [{address: %q}]}
  - {name: u, backends: [{address: %q}]}
routes:
  - {listener: %s, pool: t}
  - {listener: dns, pool: u}
`
	s, file := startFile(t, fmt.Sprintf(yaml, "old", ta, u1, "old"))
	oldAddr, dnsAddr := s.Addr("old").String(), s.Addr("dns").String()
	if got := udpName(t, dnsAddr); got != "u1" {
		t.Fatalf("udp answered by %q", got)
	}
	c, name := greeted(t, oldAddr)
	if name != "ta" {
		t.Fatalf("tcp greeted by %q", name)
	}

	writeFile(t, file, fmt.Sprintf(yaml, "new", tb, u2, "new"))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := udpName(t, dnsAddr); got != "u2" {
		t.Errorf("a new udp flow after the reload answered by %q, want u2", got)
	}
	if s.Addr("dns").String() != dnsAddr {
		t.Errorf("the kept udp listener moved from %s to %s", dnsAddr, s.Addr("dns"))
	}
	nc, name := greeted(t, s.Addr("new").String())
	if name != "tb" {
		t.Errorf("the added tcp listener greeted by %q, want tb", name)
	}
	nc.Close()
	if d, err := net.DialTimeout("tcp", oldAddr, time.Second); err == nil {
		d.Close()
		t.Errorf("the removed listener %s still accepts", oldAddr)
	}
	r := bufio.NewReader(c)
	io.WriteString(c, "still here\n")
	if line, err := r.ReadString('\n'); err != nil || line != "still here\n" {
		t.Fatalf("the established connection on the removed listener: %q, %v", line, err)
	}

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a connection open", err)
	case <-time.After(200 * time.Millisecond):
	}
	io.WriteString(c, "draining\n")
	if line, err := r.ReadString('\n'); err != nil || line != "draining\n" {
		t.Fatalf("during Shutdown: %q, %v", line, err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestStatusPageShowsL4 opens the status page in headless Chromium with a tcp pool serving
// an open connection: the pool is marked tcp/udp, its backend shows one open connection, and the
// listeners table shows the tcp listener's accepted connection.
func TestStatusPageShowsL4(t *testing.T) {
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); exe == "" && err == nil {
		exe = "/usr/bin/chromium"
	}
	if exe == "" {
		t.Skip("no chromium in PATH or /usr/bin/chromium: the browser test needs Debian's chromium package")
	}
	if testing.Short() {
		t.Skip("starts a browser; skipped with -short")
	}
	ta := peertest.TCPGreeter(t, "ta")
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: db, address: "127.0.0.1:0", protocol: tcp}]
pools: [{name: tcp, backends: [{name: ta, address: %q}]}]
admin: {address: "127.0.0.1:0"}
`, ta))
	c, _ := greeted(t, s.Addr("db").String())
	defer c.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true), chromedp.WindowSize(1280, 640))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+s.AdminAddr()+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-listener="db"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('tr[data-backend="ta"] td.busy').textContent === "1"`, chromedp.WithPollingTimeout(30*time.Second)),
	); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return v
	}
	heading, open := text(`section[data-pool="tcp"] h2`), text(`tr[data-backend="ta"] td.busy`)
	header, accepted := text(`section[data-pool="tcp"] thead`), text(`tr[data-listener="db"] td.accepted`)
	if heading != "tcp/udp pool tcp" || open != "1" || accepted != "1" || !strings.Contains(header, "bytes in / out") {
		t.Errorf("page shows heading %q, open %q, header %q, listener accepted %q", heading, open, header, accepted)
	}
}
