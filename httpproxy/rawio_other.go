//go:build !linux

package httpproxy

import (
	"net"
	"syscall"
)

// rawIO is the plain net.Conn path on systems other than Linux, where the raw system calls of
// rawio_linux.go are not used: rc stays nil, so rawConn is not used either and deadlineConn
// writes and reads through the embedded connection.
type rawIO struct {
	rc syscall.RawConn
}

func (x *rawIO) init(net.Conn) {}

func (x *rawIO) read(c net.Conn, p []byte) (int, error)  { return c.Read(p) }
func (x *rawIO) write(c net.Conn, p []byte) (int, error) { return c.Write(p) }

// peerGone cannot peek without the raw socket; it reports the connection usable.
func (x *rawIO) peerGone() bool { return false }

// pending cannot peek without the raw socket; it reports nothing waiting.
func (x *rawIO) pending() bool { return false }
