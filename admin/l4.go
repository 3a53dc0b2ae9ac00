package admin

import (
	"ballast/upstream"
)

// ListenerCounters is what a data plane counts per listener: the L4 plane for its tcp and udp
// listeners, the HTTP plane for the PROXY headers its accept_proxy listeners refuse.
type ListenerCounters interface {
	ListenerStats() []ListenerStats
}

// ConnCounters is what an L4 plane counts per backend: connections and the bytes they moved.
type ConnCounters interface {
	// Conns returns b's counters on this plane (zero when the plane never used b).
	Conns(b *upstream.Backend) ConnStats
}

// ListenerStats are one listener's counters, as GET /api/pools and /metrics show them. The
// fields a protocol does not count stay zero.
type ListenerStats struct {
	Listener string `json:"listener"`
	Protocol string `json:"protocol"` // http, tcp or udp
	// Accepted counts tcp connections accepted; Active those open now (tcp), or the live flows
	// (udp).
	Accepted uint64 `json:"accepted"`
	Active   int64  `json:"active"`
	// ProxyRefused counts connections closed for a missing or malformed PROXY header.
	ProxyRefused uint64 `json:"proxy_refused"`
	// NoRoute counts tcp connections no route took (no SNI match).
	NoRoute uint64 `json:"no_route"`
	// NoBackend counts tcp connections closed because no backend could be had (none usable,
	// queue full or timed out, every connect failed).
	NoBackend uint64 `json:"no_backend"`
	// IdleClosed counts tcp connections closed by idle_timeout.
	IdleClosed uint64 `json:"idle_closed"`
	// Retries counts tcp connects after the first and udp flows moved after a refusal.
	Retries uint64 `json:"retries"`
	// Terminations counts ended tcp connections by termination state, as HAProxy's: "--"
	// normal, "SD" the backend reset or failed mid-stream, "CD" the client did, "cD" idle
	// timeout, "KD" shut down, "CR"/"cR" the client left or stalled before routing, "PR"
	// refused (untrusted PROXY peer, no route), "SC"/"sC" no backend or every connect refused
	// or timed out, "SQ"/"sQ" queue full or timed out, "RC" no descriptor (docs/l4.md).
	Terminations map[string]uint64 `json:"terminations,omitempty"`
	// Flows counts udp flows started; FlowsExpired those ended by idle_timeout.
	Flows        uint64 `json:"flows"`
	FlowsExpired uint64 `json:"flows_expired"`
	// DroppedMaxFlows and DroppedNoBackend count udp datagrams dropped because a new flow would
	// exceed max_flows, or because no backend had a free slot.
	DroppedMaxFlows  uint64 `json:"dropped_max_flows"`
	DroppedNoBackend uint64 `json:"dropped_no_backend"`
	// Datagrams counts udp datagrams read from clients: each is forwarded or counted in one
	// of the drops above or below, but DroppedOverflow, which the kernel dropped unread.
	Datagrams uint64 `json:"datagrams,omitempty"`
	// Forwarded counts udp datagrams sent to backends, Replies the replies sent to clients.
	Forwarded uint64 `json:"forwarded,omitempty"`
	Replies   uint64 `json:"replies,omitempty"`
	// DroppedDescriptors: a new flow would pass the process's descriptor budget for flows;
	// DroppedRate: it would start faster than new_flow_rate; DroppedSend: the backend socket
	// did not take the datagram; DroppedOverflow: the listener socket's receive buffer was full
	// (SO_RXQ_OVFL); RepliesDropped: a reply the listener socket could not send.
	DroppedDescriptors uint64 `json:"dropped_descriptors,omitempty"`
	DroppedRate        uint64 `json:"dropped_rate,omitempty"`
	DroppedSend        uint64 `json:"dropped_send,omitempty"`
	DroppedOverflow    uint64 `json:"dropped_overflow,omitempty"`
	RepliesDropped     uint64 `json:"replies_dropped,omitempty"`
	// MaxFlows is the udp flow cap in force: max_flows, or the descriptor budget when lower.
	MaxFlows int `json:"max_flows,omitempty"`
	// BytesIn counts bytes from clients to backends, BytesOut back (udp: payload bytes).
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
}

// ConnStats are one backend's connection counters on an L4 plane; in flight is the backend's
// own count (open connections or live flows).
type ConnStats struct {
	Conns           uint64 `json:"connections"`
	BytesIn         uint64 `json:"bytes_in"`
	BytesOut        uint64 `json:"bytes_out"`
	ConnectFailures uint64 `json:"connect_failures"`
}

// CountListeners adds the planes' listener counters; call it before Install.
func (p *Plane) CountListeners(ls ...ListenerCounters) { p.listeners.Store(&ls) }

// CountConns adds the L4 planes' backend counters; call it before Install.
func (p *Plane) CountConns(cs ...ConnCounters) { p.conns.Store(&cs) }

// listenerStats lists every plane's listener counters.
func (p *Plane) listenerStats() []ListenerStats {
	out := []ListenerStats{}
	if ls := p.listeners.Load(); ls != nil {
		for _, l := range *ls {
			out = append(out, l.ListenerStats()...)
		}
	}
	return out
}

// connStats sums the L4 planes' counters of b.
func (p *Plane) connStats(b *upstream.Backend) ConnStats {
	var sum ConnStats
	if cs := p.conns.Load(); cs != nil {
		for _, c := range *cs {
			s := c.Conns(b)
			sum.Conns += s.Conns
			sum.BytesIn += s.BytesIn
			sum.BytesOut += s.BytesOut
			sum.ConnectFailures += s.ConnectFailures
		}
	}
	return sum
}

// l4Pool reports whether the installed configuration's pool serves tcp or udp listeners.
func (st *state) l4Pool(name string) bool { return st != nil && st.cfg.L4Pool(name) }
