package server

import (
	"context"
	"errors"

	"ballast/config"
	"ballast/h2proxy"
	"ballast/upstream"
)

// h2Plane is the HTTP/2 proxy as a Plane. It has no sockets of its own: the http plane's
// fronts (tlsfront.go) hand it the connections that speak HTTP/2. It swaps after the http
// plane, whose routes, budgets and counters it shares.
type h2Plane struct {
	http  *httpPlane
	proxy *h2proxy.Proxy
}

func (p *h2Plane) Name() string { return "http2" }

func (p *h2Plane) Listeners(*config.Config) []config.Listener { return nil }

func (p *h2Plane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	return p.proxy.Swap(httpPart(cfg), pools, p.http.proxy)
}

func (p *h2Plane) Serve(string, Socket) error {
	return errors.New("http2 plane: serves connections from the http plane, not sockets")
}

// Shutdown drains after the fronts have handed over every connection they accepted: a
// connection still being sniffed when shutdown began is served (and sent GOAWAY) like the rest.
func (p *h2Plane) Shutdown(ctx context.Context) error {
	p.http.fronts.wait(ctx)
	return p.proxy.Shutdown(ctx)
}
