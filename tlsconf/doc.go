// Package tlsconf turns the configuration's tls sections into crypto/tls configurations:
// a listener's certificates and policy (Server), re-read on every reload and served through
// an atomic pointer so that a handshake never takes a lock and a reload drops no connection,
// and the client side of a pool's backend connections (Backend).
//
// Both only read files when built; the configurations they return are immutable and safe
// for concurrent use.
package tlsconf
