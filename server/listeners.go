package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"ballast/config"
)

// Socket is a listener's bound socket: Stream for http and tcp listeners, Packet for udp ones.
// Exactly one is set.
type Socket struct {
	Stream net.Listener
	Packet *net.UDPConn
}

// Addr is the socket's bound address.
func (s Socket) Addr() net.Addr {
	if s.Packet != nil {
		return s.Packet.LocalAddr()
	}
	return s.Stream.Addr()
}

// Close closes the socket; closing it again reports no error for a stream (see
// onceCloseListener) and net.ErrClosed for a packet socket, which callers ignore.
func (s Socket) Close() error {
	if s.Packet != nil {
		return s.Packet.Close()
	}
	return s.Stream.Close()
}

// socket is a bound socket, the configured listener it serves and its plane.
type socket struct {
	conf    config.Listener // as configured (the address may have port 0)
	plane   Plane
	sock    Socket
	removed bool // closed by a reload or shutdown: its Serve ending is expected
}

// onceCloseListener lets both a reload (removing the listener) and a plane's Shutdown close
// the socket; only the first Close does anything, so the second reports no error.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// SyscallConn lends the listening socket's descriptor (the L4 proxy accepts with raw calls).
func (l *onceCloseListener) SyscallConn() (syscall.RawConn, error) {
	sc, ok := l.Listener.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// listenerKey identifies a listener across reloads: same name and same configured address.
func listenerKey(l config.Listener) string { return l.Name + "\x00" + l.Address }

func closeSockets(ss []*socket) {
	for _, so := range ss {
		_ = so.sock.Close()
	}
}

// openListeners binds the listeners of cfg that are not open yet. On error it closes the
// ones it opened.
func (s *Server) openListeners(cfg *config.Config) ([]*socket, error) {
	var opened []*socket
	for _, pl := range s.planes {
		for _, l := range pl.Listeners(cfg) {
			if _, ok := s.listeners[listenerKey(l)]; ok {
				continue
			}
			sock, err := listen(l, cfg.HA != nil)
			if err != nil {
				closeSockets(opened)
				for _, so := range s.listeners {
					if so.conf.Address == l.Address {
						return nil, fmt.Errorf("listener %s: %s is already served by listener %s; a listener cannot be renamed by a reload, restart instead", l.Name, l.Address, so.conf.Name)
					}
				}
				return nil, fmt.Errorf("listener %s: %w", l.Name, err)
			}
			opened = append(opened, &socket{conf: l, plane: pl, sock: sock})
		}
	}
	return opened, nil
}

// listen binds one listener's socket: a datagram socket for udp, a stream listener otherwise.
// With freebind (an ha section) the socket may bind an address the host does not hold yet:
// an HA backup binds its listeners before it becomes master and receives their addresses.
func listen(l config.Listener, freebind bool) (Socket, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	if freebind {
		lc.Control = setFreebind
	}
	if l.Protocol == config.ProtocolUDP {
		pc, err := lc.ListenPacket(context.Background(), "udp", l.Address)
		if err != nil {
			return Socket{}, err
		}
		return Socket{Packet: pc.(*net.UDPConn)}, nil
	}
	// No TCP keep-alive probes on client connections (HAProxy's default, option tcpka off):
	// idle_timeout closes idle clients, and the probes' setsockopt calls cost every accept.
	ln, err := lc.Listen(context.Background(), "tcp", l.Address)
	if err != nil {
		return Socket{}, err
	}
	return Socket{Stream: &onceCloseListener{Listener: ln}}, nil
}

// serve hands one socket to its plane, by listener name, in its own goroutine.
func (s *Server) serve(so *socket) {
	s.mu.Lock()
	s.listeners[listenerKey(so.conf)] = so
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := so.plane.Serve(so.conf.Name, so.sock)
		s.mu.Lock()
		expected := so.removed
		s.mu.Unlock()
		if err != nil && !expected {
			s.serveErr <- fmt.Errorf("listener %s (%s): %w", so.conf.Name, so.sock.Addr(), err)
		}
	}()
}

// closeRemoved closes the sockets of listeners cfg no longer has, and warns about options a
// kept socket cannot take on.
func (s *Server) closeRemoved(cfg *config.Config) {
	keep := map[string]config.Listener{}
	for _, pl := range s.planes {
		for _, l := range pl.Listeners(cfg) {
			keep[listenerKey(l)] = l
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, so := range s.listeners {
		l, ok := keep[k]
		if !ok {
			so.removed = true
			_ = so.sock.Close()
			delete(s.listeners, k)
			s.logger.Info("listener closed", "listener", so.conf.Name, "address", so.sock.Addr().String())
			continue
		}
		if fixedOptionsChanged(so.conf, l) {
			s.logger.Warn("listener timeouts, header limit, TLS, accept_proxy and max_flows apply to new sockets only; restart (or rename the listener) to change them", "listener", l.Name)
		}
	}
}

// fixedOptionsChanged reports a change in the options a served listener cannot take on.
// Certificates and the TLS policy are taken on by a reload (see tlscerts.go); turning TLS on
// or off is not.
func fixedOptionsChanged(a, b config.Listener) bool {
	a.ExposeBackend, b.ExposeBackend = false, false
	if (a.TLS == nil) != (b.TLS == nil) {
		return true
	}
	a.TLS, b.TLS = nil, nil
	a.ListenerPolicy, b.ListenerPolicy = config.ListenerPolicy{}, config.ListenerPolicy{} // applied by Swap
	return !reflect.DeepEqual(a, b)
}

// setFreebind sets IP_FREEBIND (and IPV6_FREEBIND) on a socket before it binds.
func setFreebind(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if network == "tcp6" || network == "udp6" {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
