package httpcore

import (
	"context"
	"io"
	"time"

	"ballast/upstream"
)

// Bridge lends one engine's HTTP/1.1 backend connections to another: the HTTP/2 engine sends
// a request without a body to an http1 pool through the HTTP/1 engine's keep-alive
// connections (no goroutine, no per-request transport state), with the same deadlines,
// fresh-connection retries and failure classes as an HTTP/1 request. Neither engine imports
// the other; the server hands one to the other as a Bridge.
type Bridge interface {
	// Upstream1 returns a request to backend b of pool p, nil when the engine keeps no
	// connections to b.
	Upstream1(p *Pool, b *upstream.Backend) Upstream1
}

// Upstream1 is one HTTP/1.1 request to one backend through a Bridge. The caller fills it
// (SetLine, Header), may Watch a context, calls RoundTrip, reads the response and calls
// Release. It is used by one goroutine at a time; the cancel Watch arranges may come from any.
type Upstream1 interface {
	// SetLine sets the method, the request target and Host.
	SetLine(method, target, host []byte)
	// Header is the request's fields, to fill (Host set by SetLine).
	Header() Header
	// Watch cancels the request when ctx ends: RoundTrip or a body read in progress then
	// returns at once.
	Watch(ctx context.Context)
	// RoundTrip sends the request and reads the response headers; a keep-alive race is
	// retried on a fresh connection first. The Outcome's Failure is OK for a response.
	RoundTrip() Outcome
	// Status, ResponseFields and ContentLength describe the response (its hop-by-hop fields
	// are the caller's to drop; the fields are valid until Release); TTFB is the time from
	// dispatch to its headers.
	Status() int
	ResponseFields() []Field
	ContentLength() int64
	TTFB() time.Duration
	// Body is the response body; its Close ends the response (the connection goes back to
	// the pool when the body was read to its end).
	Body() io.ReadCloser
	// Release ends the request and returns its state to the engine.
	Release()
}

// Field is one header field.
type Field struct{ Name, Value []byte }
