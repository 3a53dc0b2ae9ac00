// Package h1 is Ballast's event-loop HTTP/1.1 engine: plain-HTTP, h2c and TLS listeners served from the
// shards of an evloop.Group, one per P, where every connection of a request (the client's and
// the backend's) lives on the shard that accepted the client, and a ready connection is read,
// its request parsed, routed, balanced and forwarded, and the response passed back, on that
// shard's goroutine without a hand-off.
//
// API: New builds an Engine over an httpcore.Core (before the core's first Swap: the engine
// attaches its per-backend state through it, and reloads reach it the same way), with the
// limits of its HTTP/2 client connections (h2config.go; SetHTTP2 replaces them, for tests);
// Serve serves one socket as the configured listener of that name (an h2c one too: the first
// bytes tell HTTP/2 from HTTP/1.1), ServeTLS a TLS one (it must lend its descriptor: the
// shards accept from it with raw accept4); Shutdown stops accepting, closes idle connections
// and waits for the requests in flight; Stats reports what the engine counts (responses by
// class, retries and hedges are the core's), HTTP2Counters what its HTTP/2 client connections
// count and H2BackendStats what its HTTP/2 backend connections do (package admin shows all
// three on /metrics). Package server serves every HTTP listener with it (server/plane.go). The engine needs Linux (epoll): elsewhere New fails, and a configuration
// with an HTTP listener is refused.
//
// # A request's path
//
// On an accept_proxy listener the connection's first bytes are its PROXY header (v1 or v2,
// proxyproto.Parse over what arrived, within read_header_timeout of the accept; a peer outside
// trusted_proxies is closed at accept); its client becomes the connection's peer, and is
// then counted against max_conns_per_client. On a TLS listener the handshake follows (below).
//
// On an h2c listener the first bytes decide (sniff, in h2conn.go): the whole client preface
// makes the connection an HTTP/2 one on the shard, an HTTP/1 request line (empty lines before
// it skipped) an HTTP/1.1 one, served as on a plain listener with those bytes as its first
// input; anything else is closed without an answer.
//
// The client's socket is readable: the shard reads into its shared buffer. headEnd finds the
// end of the head (resuming where it stopped, so a head arriving a byte at a time costs one
// pass); checkRequest decides the framing and refuses, in one pass over the wire bytes, what
// two parsers could read differently (request smuggling: Content-Length with
// Transfer-Encoding, repeated or malformed lengths, codings other than chunked, obs-fold,
// field names that are not tokens, control bytes, bare LF ends of the head, a missing or
// repeated Host, targets that are not origin-, absolute- or asterisk-form; the same pass
// notes the fields the core needs to know of, httpcore.Scan); fasthttp's RequestHeader parses
// the accepted head, and the forwarded head is written from it. Cookies are read from the raw
// Cookie fields (message.go), never parsed into fasthttp's pairs, which it would write
// instead: a client's Cookie field reaches the backend as it was sent. Bytes
// after the head (a body, a pipelined request) are copied to the connection's own buffer,
// because the shard's is reused by the next read. HTTP semantics are package httpcore's: the
// engine calls an httpcore.Exchange's steps on its views of the heads (message.go): Begin,
// Route, Admit (access control, rate limits, body limits, redirects), Prepare (hop-by-hop
// fields, request IDs, rewrites, header rules, forwarding fields), Key, then
// httpcore.Pool.AcquireAsync (the sticky cookie's backend, else the balancer; a request that
// must wait in the backlog holds an upstream.Ticket, not a goroutine). The request goes out on an idle connection of this shard to that backend (each
// backend keeps per-shard idle lists; idle connections stay registered, so a backend closing
// one is seen at once), or on a new one (a raw non-blocking connect; a host name is resolved
// in a goroutine and the answer posted back). The response head is read and checked
// (checkResponse), given the core's response side (StripHopByHop, Respond: expose_backend,
// request IDs, sticky cookies, header rules; the changes are kept beside the raw head and
// rendered with it, so the backend's fields go out as they came) and
// written with the body bytes that came with it, in one write when they are few.
//
// # Framing
//
// Request and response bodies: Content-Length (reads bounded by what is left, so nothing of
// the next message is read with it), chunked (decoded strictly and chunked again, trailers
// passed on; a malformed chunk ends the request with 400, or cuts the client off after what
// was valid of a response), and responses delimited by the backend's close (chunked to
// HTTP/1.1 clients, the connection kept; delimited by our close to HTTP/1.0 clients).
// Requests: bodies up to 64 KiB are read whole before a backend is picked, so that they can be
// sent again; larger and chunked ones stream. A backend may answer before it has the whole
// body (an early 413): the answer is passed on, also when the backend's close resets the
// connection under a body write (early.go reads what it sent first). The rest of an HTTP/1
// client's Content-Length body with at most 1 MiB left is then read and dropped as it comes
// (under the body timer), and the connection serves the next request; with more left, or a
// chunked body, it closes after the answer. Empty lines before a request line are skipped. Expect: 100-continue is answered by the engine
// and not forwarded. Pipelined requests are served one at a time, in order. HTTP/1.0 requests
// with a Host go to the backend as HTTP/1.1; the client's connection is kept only when it asked
// (Connection: keep-alive) and is told so. An Upgrade request is a tunnel after the backend's
// 101, copied both ways on the shard with half-close.
//
// # Buffers, backpressure and bounds
//
// An idle connection holds its socket and its record (no goroutine, no buffer). A connection
// borrows a buffer from the shard's pool only for bytes it must keep between events (a head
// split across reads, a pipelined request, a response its client cannot take yet) and gives
// it back when drained. A response the client does not take stops the backend from being read
// (and a request body the backend does not take stops the client from being read): at most one
// read (64 KiB) is held per direction, the rest stays in the sockets, and the peer's writes
// block. Heads are bounded by max_header_bytes (431 beyond), response heads by 64 KiB, chunk
// lines and trailers by 8 KiB.
//
// # Timers
//
// One timer per connection on the shard's wheel, its meaning by phase: the client's
// read_header_timeout (from accept, or from a kept-alive request's first byte), idle_timeout
// (keep-alive idleness; and every 64 KiB of a request body must arrive within it, 408
// otherwise; and a client that takes nothing of its response for that long is dropped), the
// pool's queue_timeout in the backlog (503 with Retry-After); the backend's timeouts.connect,
// timeouts.response (to the response head, then inactivity while the body streams) and
// timeouts.idle of a pooled connection. Moving a timer later costs a store.
//
// # Retries and replay safety
//
// The core decides after a failed attempt (httpcore.Outcome: Fresh, Retryable, within
// retries.attempts and the retry budget; BackendFailure for outlier detection): a request any
// byte of which may have reached a backend is sent again only if idempotent; a pooled
// connection that failed is the keep-alive race and is retried on a fresh connection up to
// twice; other failures go to another backend. A non-idempotent request
// checks its pooled connection for a close before it is written (one peek).
//
// Concurrency: Engine's methods are safe for concurrent use. Everything of a connection runs
// on its shard's goroutine; the core's table is one atomic load per request (an exchange keeps
// the table it started with); counters are per shard and summed on read. Access-log lines are formatted
// on the shard and written by a goroutine per shard, never on the shard itself. Nothing on a
// shard blocks: no DNS, no disk, no TLS handshake.
//
// TLS listeners (ServeTLS, tls.go): the accepting shard admits the connection (with
// accept_proxy, once its PROXY header is read on the shard), a goroutine runs the handshake
// (package evloop/tlsconn, within read_header_timeout of the accept, crypto/tls reading first
// whatever came after the PROXY header; at most maxHandshakes at once, more closed at once and
// counted in Stats.TLSRefused), and the connection comes back to its shard, whose reads and
// writes then go through crypto/tls (clientConn's Read, Write, Writev, ShutdownWrite keep the
// socket's contract): HTTP/1.1 as on a plain listener, h2 by ALPN as on an h2c one.
//
// HTTP/2 backends (pools with protocol h2c and h2, h2backend.go): per backend per shard a few
// h2mux client Conns fed by the shard, each carrying many streams; a request's backendConn
// is then a stream (bc.h2) whose Read and Write translate between the exchange's HTTP/1.1
// bytes and the stream's frames, so retries, hedging, timeouts and the response path are the
// HTTP/1.1 ones. Bounds: the backend's SETTINGS_MAX_CONCURRENT_STREAMS (at most 100) per
// connection, 8 connections, 256 streams waiting for a slot (then 502, counted); a rendered
// response holds at most the stream's window (256 KiB), given back as it is read. An HTTP/2
// client's stream to an HTTP/2 backend is full duplex (its body goes on after the response
// head: gRPC's bidirectional streams); elsewhere the body stops there, as before. gRPC
// requests (grpc.go) get Ballast's own answers as gRPC statuses (trailers-only) and their
// grpc-timeout as a deadline. For protocol h2 (h2backendtls.go) a connection whose connect
// completed runs the TLS client handshake as below (ALPN h2, the same configurations,
// bound and counters) and serves streams only if the backend negotiated h2; its frames are
// then read and written through crypto/tls on the shard. A connection that could not be
// made (connect or handshake) fails the streams waiting for it as connect failures; one
// made under a tls a reload changed takes no more streams (GOAWAY, closed when its last
// ends).
//
// Backends over TLS (a pool's tls, backendtls.go): once the shard's connect completes, a
// goroutine runs the client handshake (tlsconn.Client on the shard, Handshake off it) within
// timeouts.connect, at most maxBackendHandshakes at once (Stats.BackendTLSRefused past it), and
// the connection comes back to its shard, where backendConn's Read, Write and ShutdownWrite go
// through crypto/tls; it is pooled, kept alive, retried and tunnelled as a plain one. A
// handshake that fails or times out is a connect failure (nothing was sent: any method may
// go elsewhere), logged and counted (Stats.BackendTLSFailures). The client configuration
// (tlsconf.Backend: server name, roots, client certificate, ALPN http/1.1) and its session
// cache are built per backend when the pool is attached, off the shards (a file that cannot be
// read refuses the configuration); a reload that changes the pool's tls builds new ones beside
// the old, each connection takes the one of its exchange's table, and idle connections made
// under another tls are closed instead of reused.
//
// # Compression
//
// A route's compress (compress.go): the core decides in Respond (types, min_size, the
// client's Accept-Encoding with q-values, Vary, the weak ETag; never HEAD, 204, 206, 304 or
// an encoded body); the engine drops Content-Length and pushes each read's body bytes (a
// chunked body's decoded pieces) into an httpcore.Encoder from the shard's pool, writing what
// it produces as chunks to an HTTP/1.1 client, delimited by the close to an HTTP/1.0 one, as
// DATA to an HTTP/2 stream. A read that did not fill its buffer, and a wait for the backend
// with coded bytes held, end with a flush, so a streamed body streams. Backpressure is
// unchanged: one read's coded bytes wait for a client that does not take them. A shard has at
// most maxEncoders (32) in use, about 2 MB of state each for brotli (256 KiB window) and 1 MB
// for gzip, and keeps keepEncoders (4) idle per coding; beyond the bound a response goes as it
// is (Vary kept), counted in Stats.CompressDeclined.
//
// A client that closes its side while its request waits for the response head (gone.go) gets
// one second to be answered (it may only have half-closed), then the exchange is abandoned.
package h1
