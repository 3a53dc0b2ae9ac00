// Package h2proxy is Ballast's HTTP/2 engine: it serves HTTP/2 connections that the server
// hands it (TLS connections that negotiated h2 by ALPN, cleartext connections that opened with
// the HTTP/2 preface on an h2c listener) with Ballast's own HTTP/2 state machine (package
// h2mux; serve.go is its owner per connection) and runs each stream through package httpcore
// exactly as the HTTP/1 engine (package httpproxy) runs a request: the same route, policy,
// forwarding fields, retry decisions, answers, counters and access-log line. It does not
// import httpproxy. Backends are reached with net/http's and x/net/http2's client transports
// or the HTTP/1 engine's connections (httpcore.Bridge).
//
// API: New builds a Proxy over an httpcore.Core (whose Swap installs configurations; the
// engine attaches a transport to every backend through an httpcore.Attacher) and, optionally,
// an httpcore.Bridge to an HTTP/1 engine's backend connections; ServeConn serves one connection
// as a listener's; Shutdown sends GOAWAY and waits for the streams to finish.
//
// Contract of the request path (one stream):
//   - The core's steps in the core's order (see httpcore): Begin, Route, Admit, Prepare on a
//     copy of the stream's fields (message.go: the fields the backend gets), the pool's key,
//     Acquire, the attempt's Outcome, Retryable/Retried, Respond on the ResponseWriter's fields,
//     Log. Ballast's own answers (httpcore.Reply) are plain-text HTTP answers with the same
//     status, fields and error pages as over HTTP/1, or, for gRPC, trailers-only answers.
//   - The balancer picks per stream: each stream is one Acquire/Release on the pool, counts
//     in flight from dispatch until its response body is done, and waits in the backlog
//     queue (max_conns, max_queue) like an HTTP/1 request.
//   - Backends are reached per pool protocol: http1, h2 (http2.Transport over TLS with ALPN h2)
//     or h2c (http2.Transport, prior knowledge). For http1, a stream without a request body
//     (nor a grpc-timeout) goes through the Bridge (the HTTP/1 engine's keep-alive
//     connections: no goroutine per request, keepalive.max_idle and max_requests apply); one
//     with a body goes through http.Transport (TLS when the pool has tls), which streams it
//     full duplex. Each backend has its own transport, attached in this engine's upstream slot
//     and rebuilt when a reload changes the pool's protocol or tls; a backend whose tls a
//     reload changed leaves the HTTP/1 engine's connections, which keep the tls they were
//     built with, for http.Transport. Go's transports add nothing of their own: no
//     User-Agent when the client sent none; responses get no Date nor sniffed Content-Type.
//   - Client connections (serve.go): one h2mux.Conn each, owned by the goroutine ServeConn
//     runs on, which reads into a pooled buffer and feeds it; a writer goroutine writes what
//     the Conn framed, every frame that became ready meanwhile in the same system call; a
//     timer runs the Conn's Tick at its Deadline (SETTINGS acknowledgement, stalls, idle
//     timeout, PING on silence). One mutex per connection guards the Conn. Each stream runs
//     this package's handler on a goroutine of its own, over an http.Request and an
//     http.ResponseWriter built on the stream: the request body is the bytes h2mux handed
//     over, their window given back as the handler's transport reads them; response bytes
//     are framed within the client's windows and the connection's output room, the writer
//     waiting for them (backpressure to the backend).
//   - Bodies stream both ways, full duplex, each response write flushed; trailers pass both
//     ways; a body of unknown length is cut at max_body_bytes (413); a compressed response is
//     compressed as it flows (httpcore.Compressor). A client reset cancels the backend stream
//     and is logged 499; a backend reset after the headers resets the client stream (for
//     gRPC: ends it with grpc-status 14 instead).
//   - Retries go to another backend within retries.attempts and the budget, by the core's
//     rule: after a failed connect for any method; after other failures before response
//     headers (which count as sent: http.Transport cannot tell) only for idempotent methods,
//     and only when no byte of the request body was read.
//   - Hedging (hedge.delay > 0) for idempotent requests without a body, as in the HTTP/1 engine:
//     a copy to another backend each time the delay passes without response headers, up to
//     hedge.max_hedges within the budget; the first response wins, the others are cancelled.
//   - Timeouts: timeouts.response bounds the wait for response headers (504); a gRPC request's
//     grpc-timeout is its deadline instead, for the whole call.
//   - gRPC (content-type application/grpc…): every answer Ballast gives itself is a
//     trailers-only response with HTTP 200, grpc-status and grpc-message: 14 UNAVAILABLE for
//     no backend, full queue, connect failure or reset; 4 DEADLINE_EXCEEDED for a timeout;
//     12 UNIMPLEMENTED for no route; 7 PERMISSION_DENIED for access control; 8
//     RESOURCE_EXHAUSTED for a rate or body limit.
//   - What h2mux decides before any of the handler runs (RFC 9113's rules, h2mux's doc): a
//     malformed request is reset (PROTOCOL_ERROR), a header list over the listener's
//     max_header_bytes answered 431; both get their access-log line (Core.LogRefused).
//   - Abuse limits per connection (limits.go, h2mux/limits.go; docs/operations.md): concurrent
//     streams, header list size, CONTINUATION floods, the reset budget (rapid reset,
//     MadeYouReset), empty frames, queued control frames, output room, stalls, flow-control
//     windows, idle timeout, PING on silence; counted in Proxy.Counters.
//     max_conns_per_client is counted by the server's front, once per connection.
//
// Concurrency: all methods are safe for concurrent use. The request path loads the core's
// immutable table through an atomic pointer and takes no lock shared between connections
// (the connection's own mutex around its h2mux.Conn); counters are atomics.
package h2proxy
