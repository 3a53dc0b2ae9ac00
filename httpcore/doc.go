// Package httpcore holds Ballast's HTTP semantics once, for every HTTP engine: the route
// table and its matching, traffic policy (access control, rate limits, body limits,
// redirects, request IDs and traceparent, rewrites, header rules, sticky cookies, compression,
// error pages, per-route timeouts and retries), the client address and forwarding fields
// (trusted_proxies, X-Forwarded-*, Forwarded), the outcome of an attempt and what follows
// from it (retry, hedge, answer, outlier and status counters), and the access-log line. It
// knows neither fasthttp nor net/http: the engine (package h1, the event-loop engine, for
// HTTP/1.1 and HTTP/2) parses and frames messages, moves bytes and runs attempts; the core
// decides everything else, so that a route answers alike whichever HTTP version a client
// speaks.
//
// # What an engine implements
//
// Request and Response (message.go) over its own parsed messages: fields by name over byte
// slices (Peek, AppendValues, Set, Add, Del), method, Host, target, version, declared body
// length, cookies, local address. They are implemented on a pointer into the engine's
// pooled per-request state, so passing them to the core allocates nothing and boxes nothing;
// no method takes a closure. Names are canonical ("X-Forwarded-For"); an engine compares them
// without regard to case (EqualFold). Values the core is given are copied by the engine;
// values the engine returns are read-only for the core. For the header scan an engine calls
// Scan.Note once per field name.
//
// # What an engine calls, in order, for one request
//
//	t := core.Table()                     // once per request: one atomic load
//	l := t.Listener(name)                 // cache it per table
//	x.Begin(t, l, req, Conn{Peer, TLS, HTTP2})
//	r := x.Route(req)                     // nil: answer x.Reply (404)
//	if !x.Admit(req) { answer x.Reply }   // 403, 429, 413, redirect
//	scan fields into s; x.Prepare(req, &s, upgrade)
//	p := x.Pool(); p.CountRequest(); key := p.Key(req, x.Client())
//	loop:
//	  b, err := p.Acquire(req, key, tried) // err: x.AcquireFailed(err), answer x.Reply
//	  run the attempt; fill an Outcome o
//	  p.Release(b, latency, status, p.BackendFailure(&o))
//	  o.Fresh(idempotent): the same pool again on a new connection (keep-alive race)
//	  p.Retryable(&o, idempotent, bodyUntouched) && try < p.Attempts && p.SpendRetry():
//	    MarkTried(&tried, b); x.Retried(p) once another backend took it
//	  else: x.Fail(&o), answer x.Reply (a ClientGone answer is logged, not written)
//	on a response: strip its hop-by-hop fields (x.StripHopByHop), enc := x.Respond(req, resp, b),
//	  compress the body with enc (Compressor, AppendCompressed) and drop Content-Length
//	x.Log(req, &Done{...})                 // every request, whoever answered it
//	x.Reset()                              // before the state is pooled again
//
// An engine renders Reply itself (status, Content-Type, Body, Location, Retry-After, Allow;
// Close asks an HTTP/1 engine to close the connection), and answers a head it cannot parse
// with Core.LogRefused for its line. Hedging: p.HedgeDelay > 0, an idempotent request with a
// replayable body; each copy paid with p.SpendHedge. A request's body of unknown length is cut
// at x.BodyLimit() (the failure is BodyTooLarge, 413). Expect: 100-continue is decided with
// x.ExpectContinue before the body is asked for. Connections are counted against
// max_conns_per_client with Core.AdmitConn and ReleaseConn, once per connection whatever it
// carries.
//
// # Contracts
//
//   - A route without policy costs one pointer check (Table.pol) in Admit, ApplyPolicy and
//     Respond; the steps allocate nothing once the Exchange's buffers have grown.
//   - Paths: routes match the normalised path (decoded, dot segments and repeated slashes
//     resolved); a rewrite works on that path and its result is encoded again; a target no
//     rewrite touches is forwarded byte for byte.
//   - Replay safety: a request any byte of which may have reached a backend (Outcome.Sent) is
//     sent again only if its method is idempotent (Idempotent), whatever
//     retries.non_idempotent says; an engine that cannot tell says Sent.
//   - Every answer Ballast gives itself is a Reply with a termination state (accesslog's
//     Term constants), and every request gets one access-log line, in the same file and with
//     the same keys whichever engine served it.
//
// Concurrency: Core's methods are safe for concurrent use; a Table is immutable and shared;
// an Exchange belongs to one request and one goroutine at a time. The request path takes no
// lock but a rate limiter's shard mutex; AdmitConn locks per listener on accept only.
package httpcore
