package admin

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"ballast/config"
)

// This file holds what keeps the admin API from being turned against the process: reads
// behind a token (admin.reads, admin.read_token) and backends that would be Ballast itself.

// SetSelf gives the plane the process's bound listeners (the server's), which neither the
// file nor the API may name as a backend; call it before Install.
func (p *Plane) SetSelf(f func() []config.SelfAddr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.self = f
}

// selfAddrs are the bound admin listener and the server's listeners.
func (p *Plane) selfAddrs() []config.SelfAddr {
	p.mu.Lock()
	f, ln := p.self, p.ln
	p.mu.Unlock()
	var out []config.SelfAddr
	if ln != nil {
		if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
			out = append(out, config.SelfAddr{Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), What: "the admin listener"})
		}
	}
	if f != nil {
		out = append(out, f()...)
	}
	return out
}

// selfTarget refuses a backend address that reaches one of the process's own listeners:
// proxied clients would reach the admin API as a loopback peer, or loop through Ballast.
func (p *Plane) selfTarget(addr string) error {
	if what := config.SelfTarget(addr, p.selfAddrs()); what != "" {
		return fmt.Errorf("backend address %s is %s of this process: a backend may not be Ballast itself", addr, what)
	}
	return nil
}

// checkBackends applies selfTarget to every backend of cfg (the bound addresses, which the
// file's own validation cannot know for port 0).
func (p *Plane) checkBackends(cfg *config.Config) error {
	for _, pc := range cfg.Pools {
		if cfg.DirectorPool(pc.Name) {
			continue
		}
		for _, b := range pc.Backends {
			if err := p.selfTarget(b.Address); err != nil {
				return fmt.Errorf("pool %s: %w", pc.Name, err)
			}
		}
	}
	return nil
}

// readAccess says whether r may read (GET /api/pools, /metrics): always when reads are open,
// else with Authorization: Bearer admin.token or admin.read_token.
func (p *Plane) readAccess(r *http.Request) bool {
	p.mu.Lock()
	reads, tok, rtok := p.reads, p.token, p.readToken
	p.mu.Unlock()
	if !reads {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return false
	}
	okTok := tok != "" && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
	okRead := rtok != "" && subtle.ConstantTimeCompare([]byte(got), []byte(rtok)) == 1
	return okTok || okRead
}

// readsNeedToken reports whether reads need a token now.
func (p *Plane) readsNeedToken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// read guards a handler of reads.
func (p *Plane) read(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.readAccess(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ballast"`)
			writeError(w, http.StatusUnauthorized, "reads need Authorization: Bearer TOKEN (admin.token or admin.read_token; admin.reads is token)")
			return
		}
		h.ServeHTTP(w, r)
	})
}
