//go:build !linux

package sockio

import "syscall"

// ConnectFirst does nothing off Linux: the dialer connects as usual.
func ConnectFirst(network, address string, c syscall.RawConn) error { return nil }
