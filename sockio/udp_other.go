//go:build !linux

package sockio

import (
	"errors"
	"net/netip"
	"syscall"
)

// Off Linux the UDP proxy's bare sockets are unsupported, as the TCP proxy's are.

func DialUDP(ap netip.AddrPort) (int, error)          { return -1, errors.ErrUnsupported }
func OutOfDescriptors(err error) bool                 { return false }
func Recv(fd int, p []byte) (int, syscall.Errno)      { return 0, syscall.EINVAL }
func Send(fd int, p []byte) syscall.Errno             { return syscall.EINVAL }
func DescriptorLimit() int                            { return 0 }
func ListenUDPOptions(c syscall.Conn, size int) error { return nil }

var RxqOverflowSpace = 0

func RxqOverflow(oob []byte) (uint32, bool) { return 0, false }

type PacketReader interface{ Readable(buf []byte) }
type PacketKey uint64
type PacketPoller struct{}

func NewPacketPoller() (*PacketPoller, error) { return nil, errors.ErrUnsupported }
func (p *PacketPoller) Len() int              { return 0 }
func (p *PacketPoller) Add(fd int, r PacketReader) (PacketKey, error) {
	return 0, errors.ErrUnsupported
}
func (p *PacketPoller) Remove(k PacketKey) {}

type Sockaddr struct{}

func MakeSockaddr(ap netip.AddrPort, family int) Sockaddr { return Sockaddr{} }
func SendTo(fd int, p []byte, sa *Sockaddr) syscall.Errno { return syscall.EINVAL }
func DupUDP(c syscall.Conn) (fd, family int, err error)   { return -1, 0, errors.ErrUnsupported }
