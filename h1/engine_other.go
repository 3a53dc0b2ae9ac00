//go:build !linux

package h1

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"ballast/config"
	"ballast/upstream"
)

// Off Linux the engine is not available (it runs on evloop's epoll shards): New fails.

type Engine struct{}

type backendConn struct{}

func New(cfg *config.Config, pools map[string]*upstream.Pool, logger *slog.Logger) (*Engine, error) {
	return nil, errors.ErrUnsupported
}

func (e *Engine) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	return errors.ErrUnsupported
}
func (e *Engine) Serve(name string, ln net.Listener) error          { return errors.ErrUnsupported }
func (e *Engine) Shutdown(ctx context.Context) error                { return nil }
func (e *Engine) ReopenAccessLog() error                            { return nil }
func (e *Engine) Responses(b *upstream.Backend) [6]uint64           { return [6]uint64{} }
func (e *Engine) PoolCounters(pool string) (retries, hedges uint64) { return 0, 0 }
