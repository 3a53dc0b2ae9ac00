package httpproxy

import (
	"github.com/valyala/fasthttp"
)

// errClass says what went wrong with one attempt; it decides the status and whether to retry.
type errClass uint8

const (
	errNone          errClass = iota
	errConnect                // the backend could not be reached: never received the request
	errStale                  // a pooled connection was found closed before any request byte was sent
	errClosed                 // the connection closed or reset after the request was (partly) sent
	errTimeout                // no response headers within the response timeout
	errBadGateway             // anything else on the backend side (malformed response, ...)
	errClient                 // reading the request body from the client failed
	errClientTimeout          // the client sent its request body too slowly (see upload)
	errCancelled              // a hedge lost, or the request was abandoned
)

// status is the response a failed attempt turns into.
func (c errClass) status() int {
	switch c {
	case errTimeout:
		return fasthttp.StatusGatewayTimeout
	case errClient:
		return fasthttp.StatusBadRequest
	case errClientTimeout:
		return fasthttp.StatusRequestTimeout
	}
	return fasthttp.StatusBadGateway
}

func (c errClass) String() string {
	switch c {
	case errConnect:
		return "backend connect failed"
	case errStale:
		return "backend closed an idle connection"
	case errClosed:
		return "backend closed the connection before responding"
	case errTimeout:
		return "backend response timeout"
	case errBadGateway:
		return "bad response from backend"
	case errClient:
		return "client request body failed"
	case errClientTimeout:
		return "client request body too slow"
	case errCancelled:
		return "cancelled"
	}
	return "ok"
}
