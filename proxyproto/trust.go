package proxyproto

import "net/netip"

// Trust is the set of peer addresses a PROXY protocol header is believed from (the
// configuration's trusted_proxies). An empty Trust believes every peer.
type Trust []netip.Prefix

// Allows reports whether a header from peer is believed.
func (t *Trust) Allows(peer netip.Addr) bool {
	if t == nil || len(*t) == 0 {
		return true
	}
	peer = peer.Unmap()
	for _, p := range *t {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}
