package httpcore

import "net"

// Header is the header fields of one message as an engine holds them. The core names fields in
// canonical form ("X-Forwarded-For"); an engine compares names without regard to case. Values
// it returns are read-only and stay valid until the header next changes; values it is given
// it copies (the core reuses its buffers).
//
// An engine implements Header on its own per-request state (a pointer into a pooled struct):
// passing that pointer as a Header neither allocates nor boxes, and no method takes a closure.
type Header interface {
	// Peek returns the value of the first field named name, nil when there is none.
	Peek(name []byte) []byte
	// AppendValues appends the values of every field named name to dst, joined by ", ", and
	// returns dst unchanged when there is none.
	AppendValues(dst, name []byte) []byte
	// Set replaces every field named name by one with value.
	Set(name, value []byte)
	// Add appends a field, keeping those of the same name.
	Add(name, value []byte)
	// Del removes every field named name.
	Del(name []byte)
}

// Request is a client's request as the core sees it. Host and target are as received
// (an HTTP/1.1 absolute-form target's authority having replaced Host, RFC 9112 §3.2.2); the
// core normalises the path itself, so that both HTTP versions route alike.
type Request interface {
	Header
	// Method is the request method ("GET").
	Method() []byte
	// Host is the Host field (HTTP/1) or :authority (HTTP/2); empty when the request has none.
	Host() []byte
	// Target is the request target to forward: origin form (path and query as sent),
	// absolute form, "*" or, for CONNECT, the authority. It is :path for HTTP/2.
	Target() []byte
	// SetTarget replaces the target forwarded to the backend (a rewrite, in origin form).
	SetTarget(target []byte)
	// Proto is the protocol version as it goes in the access log: "HTTP/1.1", "HTTP/2.0".
	Proto() []byte
	// ContentLength is the declared length of the request body, 0 for none, -1 when unknown
	// (chunked, or HTTP/2 without content-length).
	ContentLength() int64
	// Cookie returns the value of the request's cookie called name, nil when it has none
	// (engines that hold the raw Cookie field can use CookieValue).
	Cookie(name []byte) []byte
	// LocalAddr is the address the client connected to: the authority of a redirect when the
	// request names none (an HTTP/1.0 request without Host).
	LocalAddr() net.Addr
}

// Response is a backend's response on its way to the client.
type Response interface {
	Header
	// Status is the response status code.
	Status() int
	// ContentLength is the declared length of the body, -1 when unknown.
	ContentLength() int64
}

// Canonical field names the core reads and writes.
var (
	keyXFF          = []byte("X-Forwarded-For")
	keyXFP          = []byte("X-Forwarded-Proto")
	keyXFH          = []byte("X-Forwarded-Host")
	keyForwarded    = []byte("Forwarded")
	keyConnection   = []byte("Connection")
	keyCookie       = []byte("Cookie")
	keySetCookie    = []byte("Set-Cookie")
	keyRequestID    = []byte("X-Request-Id")
	keyTraceparent  = []byte("Traceparent")
	keyTracestate   = []byte("Tracestate")
	keyBackend      = []byte("X-Ballast-Backend")
	keyAcceptEnc    = []byte("Accept-Encoding")
	keyContentEnc   = []byte("Content-Encoding")
	keyContentType  = []byte("Content-Type")
	keyCacheControl = []byte("Cache-Control")
	keyVary         = []byte("Vary")
	keyETag         = []byte("Etag")
	keyReferer      = []byte("Referer")
	keyUserAgent    = []byte("User-Agent")
	keyTE           = []byte("Te")

	valHTTP  = []byte("http")
	valHTTPS = []byte("https")
)

// Canonical field names engines need when they render the core's answers.
var (
	KeyLocation   = []byte("Location")
	KeyRetryAfter = []byte("Retry-After")
	KeyAllow      = []byte("Allow")
)
