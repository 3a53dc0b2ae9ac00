package httpcore

import (
	"errors"
	"io"

	"ballast/accesslog"
)

// Failure says what went wrong with one attempt on a backend; with what the backend may have
// received (Outcome) it decides the answer, whether to retry, and the counters.
type Failure uint8

// Failures.
const (
	OK            Failure = iota // a response came
	Connect                      // the backend could not be reached: it never received the request
	Stale                        // a pooled connection was found closed before any request byte was sent
	Closed                       // the connection closed or reset after the request was (partly) sent
	Timeout                      // no response headers within the response timeout
	BadGateway                   // anything else on the backend side (a malformed response, ...)
	ClientFailed                 // reading the request body from the client failed
	ClientTimeout                // the client sent its request body too slowly
	ClientGone                   // the client left before the response headers
	Cancelled                    // a hedge lost, or the attempt was abandoned by Ballast
	BodyTooLarge                 // the request body went past the route's max_body_bytes
	NoTransport                  // the engine has no way to reach this backend
)

// Status is the answer a request whose last attempt failed this way gets. ClientGone is 499
// (nginx's), which only the access log sees.
func (f Failure) Status() int {
	switch f {
	case Timeout:
		return 504
	case ClientFailed:
		return 400
	case ClientTimeout:
		return 408
	case ClientGone:
		return 499
	case BodyTooLarge:
		return 413
	}
	return 502
}

// Termination is the access log's termination state of a request that ended this way.
func (f Failure) Termination() string {
	switch f {
	case OK:
		return accesslog.TermNormal
	case Connect, NoTransport:
		return accesslog.TermServerConnect
	case Timeout:
		return accesslog.TermServerTimeout
	case BadGateway:
		return accesslog.TermServerInvalid
	case ClientFailed:
		return accesslog.TermClientBody
	case ClientTimeout:
		return accesslog.TermClientTimeout
	case ClientGone, Cancelled:
		return accesslog.TermClientHeaders
	case BodyTooLarge:
		return accesslog.TermRefused
	}
	return accesslog.TermServerHeaders
}

func (f Failure) String() string {
	switch f {
	case Connect:
		return "backend connect failed"
	case Stale:
		return "backend closed an idle connection"
	case Closed:
		return "backend closed the connection before responding"
	case Timeout:
		return "backend response timeout"
	case BadGateway:
		return "bad response from backend"
	case ClientFailed:
		return "client request body failed"
	case ClientTimeout:
		return "client request body too slow"
	case ClientGone:
		return "client left before the response"
	case Cancelled:
		return "cancelled"
	case BodyTooLarge:
		return "request body too large"
	case NoTransport:
		return "backend transport not available"
	}
	return "ok"
}

// Outcome is what happened to one attempt, as the engine that ran it saw it. From it the core
// decides whether the request may go to another backend, whether it counts against the
// backend for outlier detection, the answer and the log's termination state.
type Outcome struct {
	Failure Failure
	Err     error
	// Reused: the attempt ran on a pooled connection. Sent: some byte of the request may have
	// reached the backend (an engine that cannot tell says true). Together they tell a
	// keep-alive race (the backend closed an idle connection as the request went out) from a
	// failure of the backend's.
	Reused, Sent bool
	// Status is the response's status when Failure is OK.
	Status int
}

// Retryable reports whether the request may be tried again on another backend after o:
// never when any of its body was consumed (bodyUntouched false); after a connect failure for
// any method; after a stale pooled connection (nothing sent) for idempotent methods, and for
// the others with retries.non_idempotent; after a connection closed once some of the request
// was sent, only for idempotent methods (RFC 9110 §9.2.2), whatever retries.non_idempotent
// says, since a backend that crashed after receiving a POST may have acted on it.
func (p *Pool) Retryable(o *Outcome, idempotent, bodyUntouched bool) bool {
	if !bodyUntouched {
		return false
	}
	switch o.Failure {
	case Connect:
		return true
	case Stale:
		return p.NonIdempotent || idempotent
	case Closed:
		return idempotent
	}
	return false
}

// Fresh reports whether a failure on a pooled connection is the keep-alive race rather than
// the backend's fault, so the request may go out again on a new connection to the same
// backend pool without counting as an attempt: when nothing of it was sent, or when it is
// idempotent.
func (o *Outcome) Fresh(idempotent bool) bool {
	return o.Reused && (o.Failure == Stale || o.Failure == Closed && idempotent)
}

// BackendFailure reports whether o counts as a failure of the backend for outlier detection:
// a response counts when it is a 5xx and outlier.include_5xx is on; a keep-alive race, a
// client's failure and Ballast's own cancellation never do.
func (p *Pool) BackendFailure(o *Outcome) bool {
	switch o.Failure {
	case ClientFailed, ClientTimeout, ClientGone, Cancelled, Stale, BodyTooLarge:
		return false
	case OK:
		return p.Include5xx && o.Status >= 500
	case Closed:
		// A pooled connection closed as the request went out is the keep-alive race.
		return !o.Reused || !errors.Is(o.Err, io.EOF)
	}
	return true
}
