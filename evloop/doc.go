// Package evloop runs sockets from event loops: a Group of shards, one per P, each an epoll
// set served by one goroutine, so that a ready connection is read, handled and written on the
// goroutine that noticed it, without a hand-off to another goroutine or thread. The HTTP/1.1
// engine (package h1) serves on it; it knows no protocol.
//
// # Shards
//
// A Shard owns descriptors registered with Add (edge-triggered: EPOLLIN, EPOLLOUT and
// EPOLLRDHUP, each reported once per change), each with the Handler that hears their events,
// a shard-wide read buffer (Buf) that a handler reads into and consumes before it returns,
// a pool of buffers for the bytes a connection must keep between events (GetBuf, PutBuf),
// a timer wheel (Arm, Stop; resolution 2^TickShift ns) and an inbox for work posted from
// other goroutines (Post). Listeners are served by every shard (Group.Listen): each shard
// waits for the listening socket in its own set (level-triggered, EPOLLEXCLUSIVE) and accepts
// one connection per report with raw accept4(2), so a connection lives on the shard that
// accepted it. Connect starts a raw
// non-blocking connect whose outcome the handler hears as writability.
//
// The shard's goroutine waits for its epoll set in the runtime's network poller (the set's
// descriptor is registered there), so a quiet shard holds no thread; it wakes for events,
// for the next timer (a read deadline on the set's descriptor, re-armed only when the
// earliest armed slot changes) and for posts (an eventfd in the set, written only while the
// shard sleeps). It stays in one read of the set between batches of events and parks after
// a batch without another epoll_pwait: every event added to the set after its last look
// raises a new edge in the runtime's poller. After a batch with a listener in it (still
// ready without a new edge) or one that filled the events it looks again first. A look is
// a raw epoll_pwait with a zero timeout, which never waits: the waiting is the runtime
// poller's, so an idle shard holds neither a thread nor a P, and the process's other
// goroutines keep their timers (TestIdleShardsLeaveTimers).
//
// # Contract
//
// Everything a Shard does for a handler runs on the shard's goroutine: Event, Expire and
// Task.Run are called there, and FD, Timer and buffer methods must only be called there,
// except Post and the Group's and Listener's methods, which are safe for concurrent use.
// Handlers must never block: no waiting system call, no lock that another goroutine may hold
// for long, no disk, no DNS, no TLS handshake. Slow work runs in its own goroutine and posts
// its result back (Post). A handler owns its descriptor's readiness (FD.Ready): a read or
// write that would block clears it and the next edge sets it again, so a handler that stops
// reading (backpressure) resumes by reading while Ready says so, without waiting for an
// event. Closing a descriptor (FD.Close) forgets it at once: events already fetched for it
// are dropped.
//
// TLS: package evloop/tlsconn runs a server-side TLS connection's handshake off the shard
// and then its records on the shard, with the same Read/Write contract as FD's.
//
// Off Linux NewGroup fails with errors.ErrUnsupported.
package evloop
