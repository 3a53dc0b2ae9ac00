// Package sockio reads and writes TCP sockets for the data planes with raw, non-blocking
// system calls that keep the calling goroutine's P (see IO for why), and arms read deadlines
// lazily (Conn). The HTTP plane uses it for client and backend connections.
//
// # Contract
//
// IO is per connection: one reader and one writer may run at once, as net.Conn allows; two
// concurrent readers or two concurrent writers are not supported. Conn is a net.Conn and may
// be used wherever one is; Listener hands out Conns. Off Linux everything falls back to the
// plain net.Conn calls.
package sockio
