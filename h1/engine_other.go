//go:build !linux

package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"

	"ballast/h2mux"
	"ballast/httpcore"
	"ballast/proxyproto"
)

// Off Linux the engine is not available (it runs on evloop's epoll shards): New fails, and
// package server refuses a configuration with an HTTP listener with this error.

type Engine struct{}

type backendConn struct{}

func New(core *httpcore.Core, logger *slog.Logger) (*Engine, error) {
	return nil, errNoEpoll
}

var errNoEpoll = errors.New("the HTTP engine needs Linux (epoll)")

func (e *Engine) Serve(name string, ln net.Listener) error { return errors.ErrUnsupported }
func (e *Engine) ServeTLS(name string, ln net.Listener, cfg *tls.Config) error {
	return errors.ErrUnsupported
}
func (e *Engine) HTTP2Counters() *h2mux.Counters          { return new(h2mux.Counters) }
func (e *Engine) Shutdown(ctx context.Context) error      { return nil }
func (e *Engine) SetProxyTrust(t proxyproto.Trust)        {}
func (e *Engine) ProxyRefused(name string) (uint64, bool) { return 0, false }
func (e *Engine) Stats() Stats                            { return Stats{} }
func (e *Engine) H2BackendStats() H2BackendStats          { return H2BackendStats{} }
