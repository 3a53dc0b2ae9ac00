//lint:file-ignore SA1019 the ported h2proxy tests use golang.org/x/net/http2's client Transport and ConfigureServer (deprecated since v0.62 in favour of net/http's own HTTP/2), as they were written.

//go:build linux

package h1

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"ballast/config"
	"ballast/httpcore"
	"ballast/internal/testcert"
	"ballast/upstream"
)

// Helpers of the tests ported from package h2proxy (the goroutine HTTP/2 plane: its tests
// started a whole server.Start, whose listeners the engine served), so that each runs
// against the engine as it was written: startYAML is h2proxy's start (the same YAML, loaded
// by config.Load, every listener served by one engine with its own HTTP/2 settings
// (h2config.go, the values h2proxy had), TLS ones with ALPN h2 and http/1.1),
// xh2c its h2c client, dualServer its h2cServer, tlsH2Server its tlsServer, waitForD its
// waitFor.

// yamlEngine is one engine serving every listener of a YAML configuration.
type yamlEngine struct {
	t     testing.TB
	e     *Engine
	core  *httpcore.Core
	file  string
	cfg   *config.Config // the running configuration (guarded by mu)
	addrs map[string]net.Addr
	mu    sync.Mutex
	pools map[string]*upstream.Pool
	wg    sync.WaitGroup
	down  sync.Once
}

// startYAML loads yaml and serves it, shut down at cleanup.
func startYAML(t testing.TB, yaml string) *yamlEngine {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startYAMLFile(t, file)
}

// startYAMLFile serves the configuration file (which a test may rewrite and Reload), shut
// down at cleanup.
func startYAMLFile(t testing.TB, file string) *yamlEngine {
	t.Helper()
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ye := &yamlEngine{t: t, file: file, addrs: map[string]net.Addr{}, cfg: cfg}
	ye.pools, err = buildPools(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ye.core = httpcore.New(nil)
	if ye.e, err = New(ye.core, nil); err != nil {
		t.Fatal(err)
	}
	if err := ye.core.Swap(cfg, ye.pools); err != nil {
		t.Fatal(err)
	}
	var lns []net.Listener
	for _, l := range cfg.Listeners {
		ln, err := net.Listen("tcp", l.Address)
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ye.addrs[l.Name] = ln.Addr()
		var tc *tls.Config
		if l.TLS != nil {
			kp, err := tls.LoadX509KeyPair(l.TLS.Cert, l.TLS.Key)
			if err != nil {
				t.Fatal(err)
			}
			tc = &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2", "http/1.1"}}
		}
		ye.wg.Add(1)
		go func(name string) {
			defer ye.wg.Done()
			var err error
			if tc != nil {
				err = ye.e.ServeTLS(name, ln, tc)
			} else {
				err = ye.e.Serve(name, ln)
			}
			if err != nil {
				t.Errorf("serving %s: %v", name, err)
			}
		}(l.Name)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ye.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
		ye.wg.Wait()
		ye.core.Close()
		ye.mu.Lock()
		for _, p := range ye.pools {
			p.Close()
		}
		ye.mu.Unlock()
	})
	return ye
}

// buildPools builds cfg's pools, each from prev's pool of the same name when there is one, as
// package server does on a reload.
func buildPools(cfg *config.Config, prev map[string]*upstream.Pool) (map[string]*upstream.Pool, error) {
	pools := map[string]*upstream.Pool{}
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc.Spec(nil), prev[pc.Name])
		if err != nil {
			return nil, err
		}
		pools[pc.Name] = p
	}
	return pools, nil
}

// Addr is the address listener name serves on.
func (ye *yamlEngine) Addr(name string) net.Addr {
	a, ok := ye.addrs[name]
	if !ok {
		ye.t.Fatalf("no listener %q", name)
	}
	return a
}

// Reload re-reads the file and installs it, as server's Reload does: new pools (from the old
// ones of the same name) through the core, the old ones closed.
func (ye *yamlEngine) Reload() error {
	cfg, err := config.Load(ye.file)
	if err != nil {
		return err
	}
	ye.mu.Lock()
	defer ye.mu.Unlock()
	pools, err := buildPools(cfg, ye.pools)
	if err != nil {
		return err
	}
	if err := ye.core.Swap(cfg, pools); err != nil {
		for _, p := range pools {
			p.Close()
		}
		return err
	}
	for _, p := range ye.pools {
		p.Close()
	}
	ye.pools, ye.cfg = pools, cfg
	return nil
}

// Shutdown stops the engine (GOAWAY on HTTP/2 connections, in-flight streams finish) once.
func (ye *yamlEngine) Shutdown(ctx context.Context) error {
	var err error
	ye.down.Do(func() { err = ye.e.Shutdown(ctx) })
	return err
}

// xh2c is an HTTP/2 client with prior knowledge (cleartext) on x/net's Transport (h2proxy's
// h2c).
func xh2c() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// dualServer serves h with HTTP/2 cleartext (prior knowledge) and HTTP/1.1 on a loopback port
// (h2proxy's h2cServer).
func dualServer(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// tlsH2Server serves h over TLS with HTTP/2 and HTTP/1.1; it returns the address and the CA
// file that verifies it (a self-signed certificate for localhost; h2proxy's tlsServer).
func tlsH2Server(t *testing.T, h http.Handler) (addr, caFile string) {
	t.Helper()
	certFile, keyFile := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	if err := http2.ConfigureServer(srv, nil); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), certFile
}

// waitForD polls cond every 10 ms until it holds or d passes (h2proxy's waitFor).
func waitForD(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metrics renders the counters /metrics shows for HTTP (admin/plane.go reads them from the
// core): ballast_backend_responses_total by backend and class, ballast_pool_retries_total.
func (ye *yamlEngine) metrics() string {
	ye.mu.Lock()
	cfg, pools := ye.cfg, ye.pools
	ye.mu.Unlock()
	var b strings.Builder
	classes := [6]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}
	for _, pc := range cfg.Pools {
		p := pools[pc.Name]
		for i, be := range p.Backends() {
			r := ye.core.Responses(be)
			for c, n := range r {
				fmt.Fprintf(&b, "ballast_backend_responses_total{backend=%q,class=%q,pool=%q} %d\n", pc.Backends[i].Name, classes[c], pc.Name, n)
			}
		}
		retries, _ := ye.core.PoolCounters(pc.Name)
		fmt.Fprintf(&b, "ballast_pool_retries_total{pool=%q} %d\n", pc.Name, retries)
	}
	return b.String()
}
