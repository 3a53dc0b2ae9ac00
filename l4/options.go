package l4

import (
	"ballast/config"
	"time"

	"ballast/proxyproto"
	"ballast/upstream"
)

// A zero option means the configuration's default (package config holds every default), so a
// proxy built in code behaves like one built from a file.

// DefaultMaxPersist bounds the source-IP persistence table; it has no configuration key.
const DefaultMaxPersist = 65536

// Key says what hash balancers hash for a connection or flow.
type Key uint8

const (
	// KeySource hashes the client address alone (balance.SourceHash): a client sticks to a
	// backend across connections.
	KeySource Key = iota
	// KeyFlow hashes the 5-tuple (balance.FlowHash), spreading one client's connections.
	KeyFlow
)

// Route sends connections to a pool.
type Route struct {
	// SNI lists the server names this route takes ("example.com", or "*.example.com" for any
	// one label in front); empty matches every connection. Routing by SNI does not terminate TLS.
	SNI  []string
	Pool *upstream.Pool
	// SendProxy prepends a PROXY protocol header to what the backend receives; 0 = none.
	SendProxy proxyproto.Version
	// Persistence, when > 0, keeps a client address on the backend it last used for this long
	// after its last connection started (LVS -p), while that backend is usable.
	Persistence time.Duration
	Key         Key
	// ConnectTimeout and ConnectAttempts, when > 0, replace the listener's (TCPOptions) for
	// this route's pool.
	ConnectTimeout  time.Duration
	ConnectAttempts int
}

// TCPOptions are one TCP listener's settings.
type TCPOptions struct {
	// Name is the listener's, for the access log.
	Name string
	// ConnectTimeout bounds one connect to a backend.
	ConnectTimeout time.Duration
	// ConnectAttempts bounds the backends tried for one connection (at most config.MaxAttempts).
	ConnectAttempts int
	// IdleTimeout closes a connection after this long without a byte in either direction.
	IdleTimeout time.Duration
	// AcceptProxy requires a PROXY protocol header (v1 or v2) from every client.
	AcceptProxy bool
	// HandshakeTimeout bounds the wait for the PROXY header and the TLS ClientHello.
	HandshakeTimeout time.Duration
	// MaxPersist bounds the source-IP persistence table; beyond it no new client is remembered.
	MaxPersist int
}

func (o TCPOptions) withDefaults() TCPOptions {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = config.DefaultConnectTimeout
	}
	if o.ConnectAttempts <= 0 {
		o.ConnectAttempts = config.DefaultAttempts
	}
	o.ConnectAttempts = min(o.ConnectAttempts, config.MaxAttempts) // balance.Tried holds 7 backends
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = config.DefaultTCPIdleTimeout
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = config.DefaultReadHeaderTimeout
	}
	if o.MaxPersist <= 0 {
		o.MaxPersist = DefaultMaxPersist
	}
	return o
}

// UDPOptions are one UDP listener's settings.
type UDPOptions struct {
	// Name is the listener's, for the access log.
	Name string
	// IdleTimeout ends a flow after this long without a datagram either way.
	IdleTimeout time.Duration
	// MaxFlows caps the live flows; datagrams that would start another are dropped and counted.
	// The process's descriptor budget for flows (shared by every UDP listener) caps it too.
	MaxFlows int
	// NewFlowRate bounds the flows started per second, NewFlowBurst at once (0: the
	// defaults; a negative rate: no bound); datagrams that would start more are dropped and
	// counted, so that a flood of new clients leaves the read loop to the established flows.
	NewFlowRate  int
	NewFlowBurst int
	// Persistence, when > 0, keeps a client address on the backend its last flow used for this
	// long after that flow started (LVS -p), while the backend takes pinned traffic.
	Persistence time.Duration
	Key         Key
}

func (o UDPOptions) withDefaults() UDPOptions {
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = config.DefaultUDPIdleTimeout
	}
	if o.MaxFlows <= 0 {
		o.MaxFlows = config.DefaultMaxFlows
	}
	switch {
	case o.NewFlowRate == 0:
		o.NewFlowRate = config.DefaultNewFlowRate
	case o.NewFlowRate < 0:
		o.NewFlowRate = 0 // unlimited
	}
	if o.NewFlowBurst <= 0 {
		o.NewFlowBurst = max(o.NewFlowRate, 1)
	}
	return o
}
