package server

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"ballast/config"
	"ballast/h1"
	"ballast/httpcore"
	"ballast/internal/peertest"
)

// TestNoEngine: where the HTTP engine cannot run (off Linux, h1/engine_other.go), Start refuses
// a configuration with an HTTP listener, naming the listener and why, and a reload that adds
// one is refused with the old configuration serving on; the L4 planes serve as everywhere.
func TestNoEngine(t *testing.T) {
	unavailable := errors.New("the HTTP engine needs Linux (epoll)")
	newEngine = func(*httpcore.Core, *slog.Logger) (*h1.Engine, error) { return nil, unavailable }
	t.Cleanup(func() { newEngine = h1.New })

	file := filepath.Join(t.TempDir(), "ballast.yaml")
	writeFile(t, file, `
listeners: [{name: web, address: "127.0.0.1:0"}]
pools: [{name: p, backends: [{address: "127.0.0.1:9"}]}]
`)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Start(cfg, Options{File: file, Logger: slog.New(slog.DiscardHandler)}); err == nil {
		_ = s.Shutdown(t.Context())
		t.Fatal("Start served an HTTP listener without the engine")
	} else if !errors.Is(err, unavailable) || !strings.Contains(err.Error(), "listener web") {
		t.Fatalf("Start: %v; want the listener named and %q", err, unavailable)
	}

	greeter := peertest.TCPGreeter(t, "ta")
	s, file := startFile(t, fmt.Sprintf(`
listeners: [{name: t, address: "127.0.0.1:0", protocol: tcp}]
pools: [{name: t, backends: [{address: %q}]}]
`, greeter))
	if _, name := greeted(t, s.Addr("t").String()); name != "ta" {
		t.Fatalf("the tcp listener without the HTTP engine: greeted by %q, want ta", name)
	}
	writeFile(t, file, fmt.Sprintf(`
listeners:
  - {name: t, address: "127.0.0.1:0", protocol: tcp}
  - {name: web, address: "127.0.0.1:0"}
pools:
  - {name: t, backends: [{address: %q}]}
  - {name: p, backends: [{address: "127.0.0.1:9"}]}
routes:
  - {listener: t, pool: t}
  - {listener: web, pool: p}
`, greeter))
	if err := s.Reload(); !errors.Is(err, unavailable) {
		t.Fatalf("a reload adding an HTTP listener: %v, want %q", err, unavailable)
	}
	if _, name := greeted(t, s.Addr("t").String()); name != "ta" {
		t.Fatalf("after the refused reload: greeted by %q, want ta", name)
	}
}
