package httpcore

import (
	"net/netip"

	"ballast/config"
)

// acl is a compiled allow/deny pair. A client in deny is refused; with a non-empty allow, so
// is a client outside it. Lists are scanned in order: they are short in practice (a few
// office or proxy ranges), and a scan over netip.Prefix values neither allocates nor locks.
type acl struct {
	allow []netip.Prefix
	deny  []netip.Prefix
}

// compileACL returns nil when both lists are empty.
func compileACL(allow, deny []string) (*acl, error) {
	if len(allow) == 0 && len(deny) == 0 {
		return nil, nil
	}
	a := &acl{}
	var err error
	if a.allow, err = config.ParsePrefixes(allow); err != nil {
		return nil, err
	}
	if a.deny, err = config.ParsePrefixes(deny); err != nil {
		return nil, err
	}
	return a, nil
}

// permits reports whether the client ip may pass. An unknown address (no valid ip) passes
// only when there is no allow list.
func (a *acl) permits(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.deny {
		if p.Contains(ip) {
			return false
		}
	}
	if len(a.allow) == 0 {
		return true
	}
	for _, p := range a.allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
