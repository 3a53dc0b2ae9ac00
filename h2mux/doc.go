// Package h2mux is Ballast's own HTTP/2 server side: a proxy-specialised connection state
// machine (RFC 9113, HPACK by golang.org/x/net/http2/hpack) with no I/O, no goroutine and no
// channel of its own, in the manner of HAProxy's mux_h2. Its owner (a shard of the event-loop
// engine, package h1, on the server and the client side; a test) feeds it the bytes
// read from the client and writes out the frames it produced; the connection reports stream
// events and frames the owner's responses within the client's flow-control windows.
//
// API: NewConn(handler, config) returns a connection with its server preface in Output.
//   - Feed(p) consumes all of p (a frame not complete yet waits for the next Feed); Handler
//     methods run inside it. A non-nil error is a connection error: GOAWAY is in Output, the
//     owner writes it and closes.
//   - Output / Advance(n): the framed bytes and how many of them the owner wrote. Call Done
//     after each batch: true means close once Output is empty.
//   - Deadline / Tick: the owner's time (Config.Now) at which Tick must run; the owner arms
//     its timer wheel with it after each call and calls Tick when it fires.
//   - Streams: Handler.Request hands over a stream with its validated request head,
//     Handler.Data its body (Consumed gives the window back as the owner forwards it),
//     Handler.Trailers its trailers, Handler.Reset its abnormal end (client reset, stream
//     error, stall, connection end), Handler.Writable the end of a wait for window or output
//     room, Handler.GoAway the client's GOAWAY. The owner answers with Headers(s, status)
//     .Add(…).Send(end), WriteData(s, p, end) (which takes what the windows allow) and
//     Trailers(s).Send. A stream ends when both sides ended it; then it is recycled.
//   - Cancel ends a stream from the owner's side (RST_STREAM; a response it cannot complete).
//     Shutdown sends GOAWAY and refuses new streams; Abort ends all streams when the socket
//     is gone. LastStreamError names the rule the last refused stream broke; a Handler that
//     is also a Refuser is told of every request head refused (431, malformed), for the log.
//   - Config: the limits (zero: the defaults of limits.go), PINGs on silence (PingAfter,
//     PingTimeout; off unless set), the owner's clock (Now), a
//     buffer pool (Buffers: an idle connection then holds no buffer) and the Counters to add
//     to (shared by a shard's or a listener's connections, read by /metrics).
//
// Contract: the connection checks every RFC 9113 rule a client can break, answering with the
// stream or connection error the RFC names, and hands the owner only requests that can be
// forwarded as HTTP/1.1 unchanged in meaning: lowercase token names, values without control
// characters, no connection-specific fields, pseudo-header fields complete and well formed,
// content-length agreeing with the body. Response fields are lowercased and cleaned of
// connection-specific ones. Every limit (limits.go) has a default, a counter (Counters) and a
// test that drives the attack it answers.
//
// Memory: a connection holds the Conn, a 4 KiB HPACK table, the fields of one header block
// at a time, one Stream struct per open stream (recycled), an input buffer only while a frame
// is incomplete (at most 16 KiB + 9) and an output buffer only while undrained (at most
// MaxOutput of DATA plus header blocks and bounded control frames). Request bodies are never
// buffered: Data hands the bytes over as they arrive.
//
// Concurrency: a Conn and its Streams belong to one goroutine at a time; Handler methods run
// on it. Counters may be read from anywhere.
package h2mux
