//go:build !linux

package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"

	"ballast/httpcore"
	"ballast/proxyproto"
)

// Off Linux the engine is not available (it runs on evloop's epoll shards): New fails.

type Engine struct{}

type backendConn struct{}

func New(core *httpcore.Core, logger *slog.Logger) (*Engine, error) {
	return nil, errors.ErrUnsupported
}

func (e *Engine) Serve(name string, ln net.Listener) error { return errors.ErrUnsupported }
func (e *Engine) ServeTLS(name string, ln net.Listener, cfg *tls.Config, h2 func(net.Conn), busy func(int)) error {
	return errors.ErrUnsupported
}
func (e *Engine) Shutdown(ctx context.Context) error      { return nil }
func (e *Engine) SetProxyTrust(t proxyproto.Trust)        {}
func (e *Engine) ProxyRefused(name string) (uint64, bool) { return 0, false }
func (e *Engine) Stats() Stats                            { return Stats{} }
func (e *Engine) H2BackendStats() H2BackendStats          { return H2BackendStats{} }
