// Package h2proxy is Ballast's HTTP/2 data plane, on net/http and golang.org/x/net/http2: it
// serves HTTP/2 connections that the server hands it (TLS connections that negotiated h2 by
// ALPN, cleartext connections that opened with the HTTP/2 preface on an h2c listener) and
// proxies each stream like the HTTP/1 plane (package httpproxy) proxies a request.
//
// API: New builds a Proxy; Swap installs each configuration with its pools and the HTTP/1
// plane whose routes, retry budgets and counters it shares; ServeConn serves one connection
// as a listener's; Shutdown sends GOAWAY and waits for the streams to finish.
//
// Contract of the request path (one stream):
//   - Routing, hash keys, retry budget, retry counters, status counters and the access-log
//     line are the HTTP/1 plane's (httpproxy.Route, CountStatus, LogAccess), so metrics and
//     the status page add both planes up.
//   - The balancer picks per stream: each stream is one Acquire/Release on the pool, counts
//     in flight from dispatch until its response body is done, and waits in the backlog
//     queue (max_conns, max_queue) like an HTTP/1 request.
//   - Backends are reached per pool protocol: http1, h2 (http2.Transport over TLS with ALPN h2)
//     or h2c (http2.Transport, prior knowledge). For http1, a stream without a request body
//     (nor a grpc-timeout) goes through the HTTP/1 plane's keep-alive connections to the
//     backend (httpproxy.Upstream1: fasthttp, no goroutine per request, keepalive.max_idle and
//     max_requests apply); one with a body goes through http.Transport (TLS when the pool has
//     tls), which streams it full duplex. Each backend has its own transport, attached in this
//     plane's upstream slot and rebuilt when a reload changes the pool's protocol or tls; a
//     backend whose tls a reload changed leaves the HTTP/1 plane's connections, which keep the
//     tls they were built with, for http.Transport.
//   - Client connections: the writes of the frames that become ready together are gathered
//     into one system call (batchConn; x/net/http2 would flush about twice per response), and
//     cleartext reads are buffered (x/net reads each frame as two exact reads).
//   - Bodies stream both ways, full duplex, each response write flushed; trailers pass both
//     ways. A client reset cancels the backend stream; a backend reset after the headers
//     resets the client stream (for gRPC: ends it with grpc-status 14 instead).
//   - Retries go to another backend within retries.attempts and the budget: after a failed
//     connect for any method; after other failures before response headers only for idempotent
//     methods and only when no byte of the request body was read.
//   - Hedging (hedge.delay > 0) for idempotent requests without a body, as in the HTTP/1 plane:
//     a copy to another backend each time the delay passes without response headers, up to
//     hedge.max_hedges within the budget; the first response wins, the others are cancelled.
//   - Timeouts: timeouts.response bounds the wait for response headers (504); a gRPC request's
//     grpc-timeout is its deadline instead, for the whole call.
//   - gRPC (content-type application/grpc…): every failure Ballast answers itself is a
//     trailers-only response with HTTP 200, grpc-status and grpc-message: 14 UNAVAILABLE for
//     no backend, full queue, connect failure or reset; 4 DEADLINE_EXCEEDED for a timeout;
//     12 UNIMPLEMENTED for no route.
//   - Abuse limits per connection (defaults in limits.go, documented in docs/operations.md):
//     concurrent streams, header list size (the listener's max_header_bytes), flow-control
//     windows, idle timeout, ping on silence; a client that resets more than
//     MaxClientResetsPerSecond streams in a second is disconnected (CVE-2023-44487), and
//     CONTINUATION floods end the connection (x/net/http2 caps a header block at the header
//     list size, CVE-2023-45288 / CVE-2024-27316 class).
//
// Concurrency: all methods are safe for concurrent use. The request path loads one immutable
// state through an atomic pointer and takes no lock; per-connection counters are atomics.
package h2proxy
