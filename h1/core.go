//go:build linux

package h1

import (
	"net/netip"
	"sync/atomic"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// HTTP semantics (routes, policy, forwarding fields, retry decisions, answers, the access-log
// line) are package httpcore's: the engine calls an httpcore.Exchange's steps in the order
// httpcore's documentation gives, over its own views of the request and response heads
// (message.go). What the engine keeps per backend is here.

// backendSlot is the engine's attachment slot on upstream backends: per-shard idle
// connections and the resolved address of a backend named by host name.
var backendSlot = upstream.NewSlot()

// backendState is what the engine keeps per backend, attached to it so that it survives
// reloads.
type backendState struct {
	shards []shardIdle
	// resolved caches the address of a backend named by host name (resolved off the shard).
	resolved atomic.Pointer[resolvedAddr]
	// tls holds the ways the backend is reached over TLS (backendtls.go), one per pool tls
	// attached lately; a connection takes the one of its exchange's pool configuration.
	tls atomic.Pointer[tlsSet]
}

// resolvedAddr is a host name's address and the shard clock reading it is good until.
type resolvedAddr struct {
	ap    netip.AddrPort
	until int64
}

// dnsTTL is how long a resolved backend address is used before it is looked up again.
const dnsTTL = int64(30 * time.Second)

// shardIdle is one shard's idle connections to a backend, touched by that shard only, as a
// stack (the most recently used on top: taking and returning one touches no other
// connection's record); padded so that two shards never share a cache line.
type shardIdle struct {
	conns []*backendConn
	h2    *h2bPool // HTTP/2 connections (pools with protocol h2c: h2backend.go)
	_     [32]byte
}

func stateOf(b *upstream.Backend) *backendState {
	s, _ := b.Attachment(backendSlot).(*backendState)
	return s
}

// attach is the engine's httpcore.Attacher: every backend of pool gets its per-shard state.
func (e *Engine) attach(pc *config.Pool, pool *upstream.Pool) error {
	tlsOf, err := tlsFor(pc, pool)
	if err != nil {
		return err
	}
	n := len(e.shards)
	pool.Attach(backendSlot, func(b *upstream.Backend) any {
		st := &backendState{shards: make([]shardIdle, n)}
		st.addTLS(tlsOf(b))
		return st
	})
	for _, b := range pool.Backends() {
		stateOf(b).addTLS(tlsOf(b))
	}
	return nil
}
