// Package httpproxy is Ballast's L7 request path, built on fasthttp: it accepts HTTP/1.x
// connections, routes each request (listener + host + path prefix, first match wins, 404
// otherwise) to an upstream.Pool, forwards it to the backend the pool picks and relays the
// answer.
//
// API: New builds a Proxy from a configuration and its pools; Serve serves one listener;
// Swap installs a reloaded configuration; Shutdown stops accepting and drains.
//
// Contract of the request path:
//   - Every backend gets one *fasthttp.HostClient, stored in upstream.Backend.Transport before
//     the pool is served (also for backends added at runtime, through Pool.SetBackendInit).
//     It is used as a keep-alive connection pool only; the proxy writes requests and reads
//     responses itself so it controls deadlines, retries and cancellation.
//   - A request counts in flight on its backend from dispatch until its response is done:
//     a streamed body (over 16 KiB, chunked or close-delimited) until it has been written to
//     the client or failed; a small body, which is read whole, once it has been read.
//     Release gets the time to response headers as the latency.
//   - Bodies stream both ways with bounded memory. Request bodies of at most 64 KiB are read
//     first so they can be replayed (retries, hedges); larger and chunked ones stream and are
//     retried only if none of their bytes was sent. Chunked trailers pass both ways.
//   - Retries go to a different backend, only for connect failures and connections closed
//     before response headers, only for idempotent methods unless retries.non_idempotent,
//     at most retries.attempts tries, and within the pool's retry budget (retries + hedges ≤
//     budget × requests over the last two seconds, plus a small floor). A backend that refuses a
//     connection is also taken out of rotation for one second (lighttpd's disable-time, nginx's
//     max_fails=1), so that when a backend dies the requests behind the first few go straight
//     to the others instead of failing or spending the budget.
//   - Hedging (hedge.delay > 0) sends an idempotent request with a replayable body to another
//     backend each time hedge.delay passes without response headers, up to hedge.max_hedges
//     copies; the first response wins, the others' connections are closed and slots released.
//   - Errors: queue full → 503 + Retry-After; queue timeout → 503 + Retry-After; no backend
//     → 503; connect failure or reset → 502; no response headers within timeouts.response →
//     504; malformed request or Content-Length with Transfer-Encoding → 400; request header
//     over the listener's max_header_bytes → 431; client too slow sending headers → 408.
//   - Hop-by-hop headers (RFC 9110 §7.6.1) and every header Connection names are stripped both
//     ways; X-Forwarded-For and Forwarded (RFC 7239) get the client appended, X-Forwarded-Proto
//     and X-Forwarded-Host are set, Host is preserved; header names are canonicalised by
//     fasthttp (header names are case-insensitive).
//   - Upgrade requests (WebSocket) are tunnelled over a dedicated backend connection after the
//     backend's 101, copying both ways with half-close; the backend counts in flight for the
//     tunnel's life.
//   - Timeouts: listener.read_header_timeout bounds the request headers (slowloris);
//     listener.idle_timeout bounds keep-alive idleness and client inactivity while a body
//     moves; pool timeouts.connect bounds the dial; timeouts.response bounds the wait for
//     response headers and then backend inactivity while the body streams.
//   - HTTP/1.0 requests that carry a Host go to the backend as HTTP/1.1, so the backend keeps
//     the pooled connection; the client side is still answered as HTTP/1.0.
//   - Cost per request (on Linux): client and backend sockets are read and written with raw
//     system calls inside syscall.RawConn callbacks (rawio_linux.go), so the runtime's monitor
//     does not hand Ps between threads on every short socket call; a request is written to the
//     backend and its response awaited without a speculative read (deadlineConn.writeAndWait);
//     client read deadlines are armed lazily (rawConn). One response is one write to the client.
//   - Traffic policy (policy.go and one file per policy): compiled once per table into
//     immutable structs; a table that configures none has a nil policy and the request path
//     checks that one pointer. In order: client address (trusted_proxies), allow/deny → 403,
//     rate limit → 429 + Retry-After, max_body_bytes → 413, redirect (answered here), request
//     ID, rewrite, request headers; then response headers, sticky cookie, compression; error
//     pages replace the bodies of Ballast's own 403/404/413/429/502/503/504. Rate limiters
//     and the per-client connection counts are sharded or taken on accept only; no policy
//     takes a global lock per request. The access log (accesslog.go) is written apart from
//     the error log, one write per line, and reopened by ReopenAccessLog (SIGUSR1).
//
// Concurrency: all methods of Proxy are safe for concurrent use. The request path loads one
// immutable route table through an atomic pointer and takes no lock of its own (hedged
// requests use a per-attempt mutex); Swap replaces the table, so a request finishes on the
// table it started with. Listener options are fixed when Serve starts; Swap changes routes,
// pools and expose_backend.
package httpproxy
