package server

import (
	"context"
	"fmt"
	"net"
	"sync"

	"ballast/config"
)

// socket is a bound listening socket, the configured listener it serves and its plane.
type socket struct {
	conf    config.Listener // as configured (the address may have port 0)
	plane   Plane
	ln      net.Listener
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

// listenerKey identifies a listener across reloads: same name and same configured address.
func listenerKey(l config.Listener) string { return l.Name + "\x00" + l.Address }

func closeSockets(ss []*socket) {
	for _, so := range ss {
		_ = so.ln.Close()
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
			// No TCP keep-alive probes on client connections (HAProxy's default, option tcpka
			// off): idle_timeout closes idle clients, and the probes' setsockopt calls cost
			// every accept.
			ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", l.Address)
			if err != nil {
				closeSockets(opened)
				for _, so := range s.listeners {
					if so.conf.Address == l.Address {
						return nil, fmt.Errorf("listener %s: %s is already served by listener %s; a listener cannot be renamed by a reload, restart instead", l.Name, l.Address, so.conf.Name)
					}
				}
				return nil, fmt.Errorf("listener %s: %w", l.Name, err)
			}
			opened = append(opened, &socket{conf: l, plane: pl, ln: &onceCloseListener{Listener: ln}})
		}
	}
	return opened, nil
}

// serve hands one socket to its plane, by listener name, in its own goroutine.
func (s *Server) serve(so *socket) {
	s.mu.Lock()
	s.listeners[listenerKey(so.conf)] = so
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := so.plane.Serve(so.conf.Name, so.ln)
		s.mu.Lock()
		expected := so.removed
		s.mu.Unlock()
		if err != nil && !expected {
			s.serveErr <- fmt.Errorf("listener %s (%s): %w", so.conf.Name, so.ln.Addr(), err)
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
			_ = so.ln.Close()
			delete(s.listeners, k)
			s.logger.Info("listener closed", "listener", so.conf.Name, "address", so.ln.Addr().String())
			continue
		}
		if fixedOptionsChanged(so.conf, l) {
			s.logger.Warn("listener timeouts, header limit and TLS apply to new sockets only; restart (or rename the listener) to change them", "listener", l.Name)
		}
	}
}

// fixedOptionsChanged reports a change in the options a served listener cannot take on.
// Certificates and the TLS policy are taken on by a reload (see tlsfront.go); turning TLS on
// or off is not.
func fixedOptionsChanged(a, b config.Listener) bool {
	a.ExposeBackend, b.ExposeBackend = false, false
	if (a.TLS == nil) != (b.TLS == nil) {
		return true
	}
	a.TLS, b.TLS = nil, nil
	return a != b
}
