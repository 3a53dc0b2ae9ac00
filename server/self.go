package server

import (
	"net/netip"

	"ballast/config"
)

// selfAddrs are the bound addresses of every listener, which the admin plane refuses as
// backends (admin.Plane.SetSelf): a backend that is Ballast itself would loop, or let proxied
// clients reach the admin API as a loopback peer.
func (s *Server) selfAddrs() []config.SelfAddr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]config.SelfAddr, 0, len(s.listeners))
	for _, so := range s.listeners {
		if so.removed {
			continue
		}
		ap, err := netip.ParseAddrPort(so.sock.Addr().String())
		if err != nil {
			continue
		}
		out = append(out, config.SelfAddr{Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), What: "listener " + so.conf.Name})
	}
	return out
}
