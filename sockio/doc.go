// Package sockio reads and writes TCP sockets for the data planes with raw, non-blocking
// system calls that keep the calling goroutine's P (see IO for why), and arms read deadlines
// lazily (Conn). The HTTP plane uses it for client and backend connections, and parks idle
// keep-alive clients in a Poller (one epoll set for all of them) instead of a goroutine each.
// The L4 proxy holds its sockets as bare descriptors from accept (Acceptor) and connect (Dial)
// to close, and forwards established connections through a Relay (one epoll set and goroutine
// per P), which hands bulk or blocked pairs to Pipe. The L4 UDP proxy holds each flow's
// backend socket as a bare connected descriptor (DialUDP) waiting in a PacketPoller (one epoll
// set, goroutine and read buffer per P for every such socket).
//
// # Contract
//
// IO is per connection: one reader and one writer may run at once, as net.Conn allows; two
// concurrent readers or two concurrent writers are not supported. Conn is a net.Conn and may
// be used wherever one is; Listener hands out Conns. Off Linux everything falls back to the
// plain net.Conn calls, and NewPoller fails (callers keep a goroutine per connection).
//
// Poller: Park, Len and Close are safe for concurrent use; wake runs in the Poller's goroutine,
// must not block, and owns the woken connection from then on. A parked connection must not be read, written
// or closed by anyone else until it is woken (Close on the Poller closes it).
//
// Relay: Forward is safe for concurrent use; the relay owns the pair's descriptors from
// Forward on (only Shutdown may be called on them meanwhile) and closes them right after Done,
// which runs once, in a goroutine of the relay's, and must not block for long.
//
// PacketPoller: Add and Remove are safe for concurrent use; Readable runs in the poller's
// goroutines and must not block. The poller never closes a socket: its owner does after Remove.
//
// Acceptor: Accept is for one goroutine at a time; Close may be called from any. Dial, Close,
// Shutdown, LocalAddr and Write are safe for concurrent use on different descriptors. Off
// Linux, Acceptor and Dial fail with errors.ErrUnsupported (the L4 TCP proxy is Linux-only).
package sockio
