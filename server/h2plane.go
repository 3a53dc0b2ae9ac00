package server

import (
	"context"
	"errors"

	"ballast/config"
	"ballast/h2proxy"
	"ballast/upstream"
)

// h2Plane is the HTTP/2 engine as a Plane. It has no sockets of its own: the http plane's
// fronts (tlsfront.go) hand it the connections that speak HTTP/2, and it has no
// configuration of its own either: the http plane's Swap installs the HTTP core's table, which
// both engines serve.
type h2Plane struct {
	http  *httpPlane
	proxy *h2proxy.Proxy
}

func (p *h2Plane) Name() string { return "http2" }

func (p *h2Plane) Listeners(*config.Config) []config.Listener { return nil }

func (p *h2Plane) Swap(*config.Config, map[string]*upstream.Pool) error { return nil }

func (p *h2Plane) Serve(string, Socket) error {
	return errors.New("http2 plane: serves connections from the http plane, not sockets")
}

// Shutdown drains after the fronts have handed over every connection they accepted: a
// connection still being sniffed when shutdown began is served (and sent GOAWAY) like the rest.
// Once both engines have stopped, the HTTP core closes (its access log, its clocks).
func (p *h2Plane) Shutdown(ctx context.Context) error {
	p.http.fronts.wait(ctx)
	err := p.proxy.Shutdown(ctx)
	select {
	case <-p.http.down:
	case <-ctx.Done():
	}
	p.http.core.Close()
	return err
}
