package l4

import (
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"ballast/accesslog"
	"ballast/sockio"
	"ballast/upstream"
)

// Termination states, as HAProxy's two characters: who or what ended the connection (C the
// client, S the server, c or s their timeout, P the proxy, R a resource of the proxy's, K a
// shutdown, - a normal end), then in which phase (R reading what routing needs: the PROXY
// header or the ClientHello, Q waiting in the backlog queue, C connecting, D forwarding data,
// - a normal end).
type term uint8

const (
	termNormal         term = iota // "--": both sides ended their streams
	termClientData                 // "CD": the client reset or failed while data flowed
	termServerData                 // "SD": the backend reset or failed while data flowed
	termIdle                       // "cD": idle_timeout passed without a byte either way
	termKilled                     // "KD": Shutdown's grace ended with the connection open
	termClientRead                 // "CR": the client left or sent garbage before routing
	termClientWait                 // "cR": the client sent no PROXY header or ClientHello in time
	termProxyRefused               // "PR": refused by the proxy: untrusted PROXY peer, no route
	termNoBackend                  // "SC": no usable backend, or every connect refused
	termConnectTimeout             // "sC": every connect attempt timed out
	termQueueFull                  // "SQ": the backlog queue was full
	termQueueTimeout               // "sQ": queue_timeout passed in the backlog
	termResource                   // "RC": the proxy had no descriptor for the backend socket
	termCount
)

var termNames = [termCount]string{"--", "CD", "SD", "cD", "KD", "CR", "cR", "PR", "SC", "sC", "SQ", "sQ", "RC"}

func (t term) String() string { return termNames[t] }

// TermStates lists the termination states in the order of Stats.Terminations.
func TermStates() []string { return termNames[:] }

// terms counts connections by termination state.
type terms [termCount]atomic.Uint64

func (c *terms) snapshot() map[string]uint64 {
	out := make(map[string]uint64, termCount)
	for i := range c {
		if n := c[i].Load(); n > 0 {
			out[termNames[i]] = n
		}
	}
	return out
}

// relayTerm is how a forwarded connection ended (A is the client, B the backend).
func relayTerm(r *sockio.RelayResult, killed bool) term {
	switch {
	case killed:
		return termKilled
	case r.Idled:
		return termIdle
	case r.Failed == 0:
		return termClientData
	case r.Failed == 1:
		return termServerData
	}
	return termNormal
}

// acquireTerm is why a pick failed.
func acquireTerm(err error) term {
	switch {
	case errors.Is(err, upstream.ErrQueueFull):
		return termQueueFull
	case errors.Is(err, upstream.ErrQueueTimeout):
		return termQueueTimeout
	}
	return termNoBackend
}

// connectTerm is why the last connect failed.
func connectTerm(err error) term {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == syscall.ETIMEDOUT {
		return termConnectTimeout
	}
	return termNoBackend
}

// logLine writes a connection's access-log line, when the access log is on.
func (p *TCP) logLine(tc *tcpConn, t term) {
	l := p.access.Load()
	if l == nil {
		return
	}
	e := accesslog.Entry{
		Transport:  "tcp",
		Listener:   p.opts.Name,
		Client:     tc.peer.Addr(),
		ClientPort: tc.peer.Port(),
		Pool:       tc.pool,
		BytesIn:    int64(tc.res.Moved[0]),
		BytesOut:   int64(tc.res.Moved[1]),
		Duration:   time.Since(tc.start),
		Upstream:   tc.connect,
		Retries:    tc.retries,

		Termination: t.String(),
	}
	if b := tc.backend; b != nil {
		e.Backend, e.BackendAddress = b.ID, b.Address
	}
	l.Write(&e)
}

// SetAccessLog makes the proxy write a line per connection to the log s holds (none while it
// holds none).
func (p *TCP) SetAccessLog(s *accesslog.Switch) { p.access.Store(s) }

// accessSwitch is an atomic pointer to a Switch whose Load is nil-safe.
type accessSwitch struct {
	p atomic.Pointer[accesslog.Switch]
}

func (a *accessSwitch) Store(s *accesslog.Switch) { a.p.Store(s) }

func (a *accessSwitch) Load() *accesslog.Log {
	if s := a.p.Load(); s != nil {
		return s.Load()
	}
	return nil
}
