//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The engine's HTTP/2 backend counters (h1.H2BackendStats) as an operator reads them: a
// running `ballast serve` with a pool of protocol h2c, requests through it, /metrics scraped
// and held against what the backend itself saw.

// e2eH2CBackend is an HTTP/2 (prior knowledge) backend that counts the connections it
// accepted, the ones open now, and the HTTP/2 requests it got; h runs after the count.
type e2eH2CBackend struct {
	addr                  string
	conns, open, requests atomic.Int64
}

func newE2EH2CBackend(t *testing.T, maxStreams int, h http.HandlerFunc) *e2eH2CBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &e2eH2CBackend{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		b.requests.Add(1)
		h(w, r)
	})}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams}
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.conns.Add(1)
			b.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.open.Add(-1)
		}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// e2eServeH2C runs ballast on a configuration with an h2c listener, the admin listener and
// pool p of protocol h2c over be (extra: more of p's YAML), with shards evloop shards. It
// returns the listener's and the admin's URLs.
func e2eServeH2C(t *testing.T, be *e2eH2CBackend, shards int, extra string) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
    h2c: true
admin:
  address: 127.0.0.1:0
pools:
  - name: p
    protocol: h2c
    backends: [{address: %q}]
%s`, be.addr, extra))
	cmd := exec.Command(e2eBin, "serve", "-c", file)
	cmd.Env = append(os.Environ(), "BALLAST_H1_SHARDS="+strconv.Itoa(shards))
	p := e2eStartCmd(t, cmd)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	a, _ := p.waitLine(true, 0, e2eAdminRE)
	return m[1], a[1]
}

// e2eScrape reads /metrics' ballast_http2_backend_* samples (name with labels -> value).
func e2eScrape(t *testing.T, adminURL string) map[string]int64 {
	t.Helper()
	resp, err := e2eClient.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]int64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "ballast_http2_backend_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		m[line[:i]] = int64(v)
	}
	if len(m) == 0 {
		t.Fatalf("/metrics has no ballast_http2_backend_* sample:\n%s", body)
	}
	return m
}

// TestServeHTTP2BackendMetrics: 10 requests from an HTTP/1.1 client and 5 streams from an
// h2c client through a pool with protocol h2c; /metrics counts 15 backend streams, as many
// connections dialled and open as the backend accepted (and has open), none waiting.
func TestServeHTTP2BackendMetrics(t *testing.T) {
	be := newE2EH2CBackend(t, 100, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	url, adminURL := e2eServeH2C(t, be, 2, "")
	if m := e2eScrape(t, adminURL); m["ballast_http2_backend_streams_total"] != 0 || m["ballast_http2_backend_connects_total"] != 0 {
		t.Fatalf("before any request: %v", m)
	}
	get := func(c *http.Client, proto string) {
		t.Helper()
		resp, err := c.Get(url + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" || resp.Proto != proto {
			t.Fatalf("%s: %d %s %q", proto, resp.StatusCode, resp.Proto, b)
		}
	}
	h1 := &http.Client{Timeout: e2eWait, Transport: &http.Transport{}}
	for range 10 {
		get(h1, "HTTP/1.1")
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Timeout: e2eWait, Transport: tr}
	for range 5 {
		get(h2c, "HTTP/2.0")
	}
	// A stream is counted as it opens; the backend counts the request as it runs: both are
	// done before the answer. Connections are counted at the dial, before the backend's accept.
	var m map[string]int64
	for end := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
		m = e2eScrape(t, adminURL)
		if m["ballast_http2_backend_connections"] == be.open.Load() || time.Now().After(end) {
			break
		}
	}
	if n := be.requests.Load(); n != 15 || m["ballast_http2_backend_streams_total"] != n {
		t.Errorf("streams_total %d, the backend got %d requests, sent 15", m["ballast_http2_backend_streams_total"], n)
	}
	conns := be.conns.Load()
	if conns < 1 || conns > 2 { // one per shard the two client connections landed on
		t.Errorf("the backend accepted %d connections, want 1 or 2", conns)
	}
	if m["ballast_http2_backend_connects_total"] != conns || m["ballast_http2_backend_connections"] != be.open.Load() || be.open.Load() != conns {
		t.Errorf("connects_total %d, connections %d; the backend accepted %d, has %d open",
			m["ballast_http2_backend_connects_total"], m["ballast_http2_backend_connections"], conns, be.open.Load())
	}
	for _, k := range []string{"ballast_http2_backend_waiting", `ballast_http2_backend_events_total{event="wait_overflow"}`,
		`ballast_http2_backend_events_total{event="connect_failure"}`, `ballast_http2_backend_events_total{event="conn_error"}`} {
		if m[k] != 0 {
			t.Errorf("%s = %d, want 0", k, m[k])
		}
	}
}

// TestServeHTTP2BackendWaitBound: with one shard and a backend that takes 4 streams per
// connection and holds them, 32 streams reach the backend (8 connections of 4), 256 requests
// wait for a slot, and every request past those is answered 502 at once: /metrics shows the
// requests waiting while they wait (exactly those neither at the backend nor refused), at
// most 8 connections, and as many wait_overflow events as clients got 502; after the
// backend answers, none waiting.
func TestServeHTTP2BackendWaitBound(t *testing.T) {
	const (
		maxConns, streams, maxWaiting = 8, 4, 256 // h1's h2bMaxConns, the backend's limit, h2bMaxWaiting
		over                          = 40
		total                         = maxConns*streams + maxWaiting + over
	)
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	be := newE2EH2CBackend(t, streams, func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		inflight.Add(-1)
		io.WriteString(w, "ok")
	})
	url, adminURL := e2eServeH2C(t, be, 1, "    retries: {attempts: 1}\n    timeouts: {connect: 30s, response: 60s}\n")
	c := &http.Client{Timeout: 2 * e2eWait, Transport: &http.Transport{MaxIdleConnsPerHost: total}}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var ok, bad, other atomic.Int64
	for range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(url + "/x")
			if err != nil {
				other.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200 && string(b) == "ok":
				ok.Add(1)
			case resp.StatusCode == 502:
				bad.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	// Every request is at the backend, waiting, or refused: the gauge says how many wait.
	var m map[string]int64
	settled := false
	for end := time.Now().Add(e2eWait); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		m = e2eScrape(t, adminURL)
		if inflight.Load() == maxConns*streams && bad.Load()+inflight.Load()+m["ballast_http2_backend_waiting"] == total {
			settled = true
			break
		}
	}
	if !settled {
		t.Fatalf("never settled: %d at the backend, %d answered 502, /metrics: %v", inflight.Load(), bad.Load(), m)
	}
	if w := m["ballast_http2_backend_waiting"]; w > maxWaiting || w < maxWaiting-over {
		t.Errorf("waiting %d, bound %d", w, maxWaiting)
	}
	if n := m["ballast_http2_backend_connections"]; n > maxConns || n != be.open.Load() {
		t.Errorf("connections %d (the backend has %d open), bound %d", n, be.open.Load(), maxConns)
	}
	if m[`ballast_http2_backend_events_total{event="waited"}`] == 0 {
		t.Error("no waited event while requests waited")
	}
	if m[`ballast_http2_backend_events_total{event="wait_overflow"}`] != bad.Load() || bad.Load() < over {
		t.Errorf("wait_overflow %d, clients answered 502: %d (at least %d)", m[`ballast_http2_backend_events_total{event="wait_overflow"}`], bad.Load(), over)
	}
	close(release)
	wg.Wait()
	m = e2eScrape(t, adminURL)
	if ok.Load()+bad.Load() != total || other.Load() != 0 {
		t.Errorf("ok %d, 502 %d, other %d of %d", ok.Load(), bad.Load(), other.Load(), total)
	}
	if p := peak.Load(); p > maxConns*streams {
		t.Errorf("%d streams at the backend at once, bound %d", p, maxConns*streams)
	}
	if m["ballast_http2_backend_waiting"] != 0 || m[`ballast_http2_backend_events_total{event="wait_overflow"}`] != bad.Load() ||
		m["ballast_http2_backend_streams_total"] != ok.Load() || be.requests.Load() != ok.Load() {
		t.Errorf("after: waiting %d, wait_overflow %d (502s %d), streams %d (backend %d, 200s %d)", m["ballast_http2_backend_waiting"],
			m[`ballast_http2_backend_events_total{event="wait_overflow"}`], bad.Load(), m["ballast_http2_backend_streams_total"], be.requests.Load(), ok.Load())
	}
}
