package server

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"ballast/config"
	"ballast/h2proxy"
	"ballast/httpproxy"
	"ballast/upstream"
)

// Plane is one data plane. The server calls Swap with the first configuration before any
// Serve and again on every reload, Serve once per socket of the listeners the plane claims,
// and Shutdown once at the end.
type Plane interface {
	// Name names the plane in logs ("http").
	Name() string
	// Listeners returns the configured listeners this plane serves.
	Listeners(cfg *config.Config) []config.Listener
	// Swap installs cfg with its pools; on error the plane keeps the previous ones.
	Swap(cfg *config.Config, pools map[string]*upstream.Pool) error
	// Serve serves the named listener's socket until Shutdown, then returns nil.
	Serve(listener string, ln net.Listener) error
	// Shutdown stops accepting and waits for in-flight work until ctx ends.
	Shutdown(ctx context.Context) error
}

// httpPlane is the HTTP/1 reverse proxy as a Plane. It also gives the admin plane its
// counters (admin.Counters).
type httpPlane struct {
	logger *slog.Logger
	proxy  *httpproxy.Proxy // nil until the first Swap
	h2     *h2proxy.Proxy   // gets the HTTP/2 connections of TLS and h2c listeners
	fronts fronts           // TLS certificates and the fronts of TLS and h2c listeners
}

func (p *httpPlane) Name() string { return "http" }

// Listeners: every configured listener is an HTTP one for now.
func (p *httpPlane) Listeners(cfg *config.Config) []config.Listener { return cfg.Listeners }

func (p *httpPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	commitTLS, err := p.fronts.prepare(cfg)
	if err != nil {
		return err
	}
	if p.proxy != nil {
		if err := p.proxy.Swap(cfg, pools); err != nil {
			return err
		}
		commitTLS()
		return nil
	}
	px, err := httpproxy.New(cfg, pools, p.logger)
	if err != nil {
		return err
	}
	p.proxy = px
	commitTLS()
	return nil
}

func (p *httpPlane) Serve(listener string, ln net.Listener) error {
	if p.proxy == nil {
		return errors.New("http plane: Serve before Swap")
	}
	if f := p.fronts.front(listener, p.h2); f != nil {
		return f.serve(ln, func(h1 net.Listener) error { return p.proxy.Serve(listener, h1) })
	}
	return p.proxy.Serve(listener, ln)
}

func (p *httpPlane) Shutdown(ctx context.Context) error {
	if p.proxy == nil {
		return nil
	}
	return p.proxy.Shutdown(ctx)
}

func (p *httpPlane) Responses(b *upstream.Backend) [6]uint64 {
	if p.proxy == nil {
		return [6]uint64{}
	}
	return p.proxy.Responses(b)
}

func (p *httpPlane) PoolCounters(pool string) (retries, hedges uint64) {
	if p.proxy == nil {
		return 0, 0
	}
	return p.proxy.PoolCounters(pool)
}
