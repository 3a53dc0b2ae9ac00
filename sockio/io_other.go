//go:build !linux

package sockio

import (
	"net"
	"syscall"
)

// IO is the plain net.Conn path on systems other than Linux, where the raw system calls of
// io_linux.go are not used: RC stays nil, so NewConn returns the connection itself and
// callers read and write through it.
type IO struct {
	RC syscall.RawConn
}

func (x *IO) Init(net.Conn) {}

func (x *IO) Read(c net.Conn, p []byte) (int, error)  { return c.Read(p) }
func (x *IO) Write(c net.Conn, p []byte) (int, error) { return c.Write(p) }

// peerGone cannot peek without the raw socket; it reports the connection usable.
func (x *IO) PeerGone() bool { return false }

// pending cannot peek without the raw socket; it reports nothing waiting.
func (x *IO) Pending() bool { return false }
