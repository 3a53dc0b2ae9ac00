//go:build !linux

package httpproxy

import "net"

// clientGone is Linux's (poll with POLLRDHUP); elsewhere a client that left is noticed when
// the response is written.
func clientGone(net.Conn) bool { return false }
