// Package httpproxy is Ballast's HTTP/1.x engine, built on fasthttp: it accepts HTTP/1.x
// connections and runs each request through package httpcore, which routes it (listener +
// host + normalised path, first match wins, 404 otherwise), applies the route's policy,
// prepares the fields to forward and decides retries, answers and the access-log line; the
// engine forwards the request to the backend the pool picks and relays the answer.
//
// API: New builds a Proxy over an httpcore.Core (whose Swap installs configurations: the
// engine attaches its per-backend state through an httpcore.Attacher); Serve serves one
// socket as the configured listener of the given name; Shutdown stops accepting and drains.
// Proxy is an httpcore.Bridge: another engine (h2proxy) sends bodyless requests to http1
// pools over this engine's backend connections (h2bridge.go). Package server runs a Proxy as
// its HTTP data plane.
//
// Contract of the request path:
//   - Every backend gets one *fasthttp.HostClient, attached in the engine's own upstream slot
//     before the pool is served (also for backends added at runtime: Pool.Attach), so it
//     survives reloads and no other engine overwrites it. Status counters are the core's.
//     It is used as a keep-alive connection pool only; the proxy writes requests and reads
//     responses itself so it controls deadlines, retries and cancellation.
//   - A request counts in flight on its backend from dispatch until its response is done:
//     a streamed body until it has been written to the client or failed; a small body (at most
//     16 KiB) that arrived with the response headers, which is taken whole, at once.
//     Release gets the time to response headers as the latency.
//   - Bodies stream both ways with bounded memory, and bytes move as they arrive: a response
//     body is held back only while more of it is already waiting (relay.WriteTo), a streamed
//     request body is flushed to the backend piece by piece (upload.WriteTo). Request bodies
//     of at most 64 KiB are read first so they can be replayed (retries, hedges); larger and
//     chunked ones stream, from their own goroutine while the response is awaited, so a
//     backend's early answer (413 after the headers) is passed on; the backend connection is
//     then closed, and the client's too if the rest of its body cannot be drained. Chunked
//     trailers pass both ways.
//   - Replay safety (the core's rule, httpcore.Pool.Retryable, fed the engine's
//     httpcore.Outcome): a request any byte of which was written to a backend socket is sent
//     again only if its method is idempotent (RFC 9110 §9.2.2), whatever
//     retries.non_idempotent says. A pooled connection is checked for a close by the backend before a non-idempotent
//     request is sent on it; a request that failed with nothing sent may go out again. The
//     fasthttp HostClients never retry on their own.
//   - Retries go to a different backend (after up to two tries on fresh connections of the
//     same pool when a pooled connection was dead), for connect failures and connections
//     closed before response headers, at most retries.attempts tries, and within the pool's
//     retry budget (retries + hedges ≤ budget × requests over the last two seconds, plus a
//     small floor; budget 0: none). A backend that refuses a connection is also taken out of rotation for one
//     second (lighttpd's disable-time, nginx's max_fails=1), so that when a backend dies the
//     requests behind the first few go straight to the others instead of failing or spending
//     the budget.
//   - Hedging (hedge.delay > 0) sends an idempotent request with a replayable body to another
//     backend each time hedge.delay passes without response headers, up to hedge.max_hedges
//     copies; the first response wins, the others' connections are closed and slots released.
//   - Request heads (head.go, checkHead): after fasthttp's parse, one pass over the raw
//     header bytes refuses field names that are not tokens and obs-fold; the target must be
//     origin-form, "*" (OPTIONS only) or http(s) absolute-form in printable ASCII; HTTP/1.1
//     needs one valid Host. An absolute-form target's authority replaces Host before routing
//     (RFC 9112 §3.2.2), so routing and forwarding use the same host. A head that ends with a
//     bare LF, which fasthttp would wait on until the header timeout, is refused at once
//     (headconn.go). The core routes on the normalised path; the target is forwarded byte for
//     byte unless a rewrite changed it (the parsed URI is dropped so fasthttp does not rewrite
//     it). A refused head closes the connection. Every answer the engine or the core gives
//     (refused heads, fasthttp's own 400/408/431) gets its access-log line.
//   - Errors (the core's answers, httpcore.Reply): queue full → 503 + Retry-After; queue
//     timeout → 503 + Retry-After; no backend → 503; connect failure or reset → 502; no
//     response headers within timeouts.response → 504; malformed request, invalid field name
//     or target, Transfer-Encoding other than chunked or with Content-Length, Upgrade with a
//     body, a bare-LF head → 400; CONNECT → 405 with Allow; version other than HTTP/1.0 and
//     1.1 → 505; request header over the listener's max_header_bytes → 431; client too slow
//     sending headers, or its body (the body timeout) → 408; Expect: 100-continue with a
//     length over max_body_bytes → 413 without 100 Continue.
//   - A client that closes its connection while the response headers are awaited is noticed
//     within a second (poll for POLLRDHUP between slices of the wait, awaitResponse): the
//     attempt is cancelled, its slot freed, nothing is answered and the log says 499.
//   - Forwarded fields are the core's (hop-by-hop stripped both ways, X-Forwarded-*,
//     Forwarded); Host is preserved (or set from an absolute-form target); no Content-Type,
//     Date or Server is added; header names are canonicalised by fasthttp (header names are
//     case-insensitive).
//   - Upgrade requests (WebSocket) are tunnelled over a dedicated backend connection after the
//     backend's 101, copying both ways with half-close; the backend counts in flight for the
//     tunnel's life.
//   - Timeouts: listener.read_header_timeout bounds the request headers (slowloris);
//     listener.idle_timeout bounds keep-alive idleness and is the request body timeout: every
//     64 KiB of a body (a shorter one whole) must arrive within it, whatever the framing, or
//     the client gets 408; pool timeouts.connect bounds the dial; timeouts.response bounds the
//     wait for response headers (counted from the last request body byte sent) and then
//     backend inactivity while the body streams.
//   - HTTP/1.0 requests that carry a Host go to the backend as HTTP/1.1, so the backend keeps
//     the pooled connection; the client side is still answered as HTTP/1.0.
//   - Cost per request (on Linux): client and backend sockets are read and written with raw
//     system calls inside syscall.RawConn callbacks (package sockio), so the runtime's monitor
//     does not hand Ps between threads on every short socket call; a request is written to the
//     backend and its response awaited without a speculative read (deadlineConn.writeAndWait);
//     client read deadlines are armed lazily (sockio.Conn). A response whose body came with its
//     headers is one write to the client.
//   - Idle keep-alive clients (idlepark.go, on Linux, plain-HTTP listeners): a connection that
//     waits longer than 250 ms for its next request is parked in the listener's
//     sockio.Poller; its goroutine ends and fasthttp takes back its buffers and request
//     context, so it costs its socket and about a kilobyte. When it becomes readable a reused
//     worker serves it again with fasthttp's ServeConn. idle_timeout, max_keepalive_requests
//     (counted across parkings), pipelining and Shutdown (parked connections are closed
//     first) behave as without parking. TLS connections keep their goroutine. After a burst
//     of 1024 parkings the proxy collects twice and returns free memory to the system, at
//     most every 10 s, so RSS follows the idle connections down.
//   - Traffic policy is the core's (httpcore): the engine hands it views of fasthttp's
//     request and response (message.go, pointers into the pooled exchange: no allocation),
//     compresses a body with the encoding the core chose (httpcore.Compressor for a stream,
//     AppendCompressed for a buffered body) and cuts a body of unknown length at the route's
//     max_body_bytes. A table without policy costs one pointer check. max_conns_per_client
//     is counted on accept (connlimit.go) unless the server's front counted it already.
//   - For another engine (h2proxy, through httpcore.Bridge): h2bridge.go lends a backend's
//     HostClient connections (one bodyless HTTP/1.1 request through the same attempt code,
//     deadlines, fresh-connection retries and failure classes), changing nothing of this
//     engine's path.
//
// Concurrency: all methods of Proxy are safe for concurrent use. The request path loads the
// core's immutable table through an atomic pointer and takes no lock of its own (hedged
// requests use a per-attempt mutex); the core's Swap replaces the table, so a request
// finishes on the table it started with. Listener options are fixed when Serve starts; a
// reload changes routes, pools, policy and expose_backend.
package httpproxy
