package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"ballast/accesslog"
	"ballast/admin"
	"ballast/config"
	"ballast/l4"
	"ballast/proxyproto"
	"ballast/upstream"
)

// l4Plane serves the tcp and udp listeners: one l4.TCP per tcp listener, with the listener's
// routes as its table, and one l4.UDP per udp listener, on the pool of its first route. A
// proxy lives as long as its listener's name: a reload swaps its table (or pool), and the
// options it was built with (idle_timeout, accept_proxy, max_flows, read_header_timeout)
// apply to new listeners only, as for http. A listener a reload removes loses its socket;
// its established connections finish on the pools they started with, and Shutdown waits for
// them with the others. It gives the admin plane its counters (admin.ListenerCounters and
// admin.ConnCounters).
type l4Plane struct {
	logger *slog.Logger

	mu  sync.Mutex // guards the fields below; never taken on the connection or datagram path
	cfg *config.Config
	tcp map[string]*l4.TCP // by listener name, including removed listeners still draining
	udp map[string]*l4.UDP
	// access is the L4 access log (logging.access, the HTTP planes' file and format): a line
	// per tcp connection and per udp flow.
	access accesslog.Switch
}

func newL4Plane(logger *slog.Logger) *l4Plane {
	return &l4Plane{logger: logger, tcp: map[string]*l4.TCP{}, udp: map[string]*l4.UDP{}}
}

func (p *l4Plane) Name() string { return "l4" }

// Listeners are the tcp and udp ones.
func (p *l4Plane) Listeners(cfg *config.Config) []config.Listener {
	var out []config.Listener
	for _, l := range cfg.Listeners {
		if l.IsL4() && !l.IsDirector() { // a director listener is served by the XDP plane
			out = append(out, l)
		}
	}
	return out
}

// Swap builds every route table and pool choice first and installs them only when all are
// valid, so that a refused configuration changes nothing.
func (p *l4Plane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	type tcpPlan struct {
		l     config.Listener
		table *l4.Table
	}
	type udpPlan struct {
		l       config.Listener
		pool    *upstream.Pool
		key     l4.Key
		persist time.Duration
	}
	var tcps []tcpPlan
	var udps []udpPlan
	for _, l := range p.Listeners(cfg) {
		routes, err := l4Routes(cfg, l, pools)
		if err != nil {
			return err
		}
		if l.Protocol == config.ProtocolTCP {
			t, err := l4.NewTable(routes)
			if err != nil {
				return fmt.Errorf("listener %s: %w", l.Name, err)
			}
			tcps = append(tcps, tcpPlan{l, t})
			continue
		}
		if len(routes[0].SNI) > 0 {
			return fmt.Errorf("listener %s: a udp listener has no SNI to route by", l.Name)
		}
		udps = append(udps, udpPlan{l, routes[0].Pool, routes[0].Key, routes[0].Persistence})
	}
	trust, err := proxyTrust(cfg)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(tcps)+len(udps) > 0 || !cfg.Logging.Access {
		if err := p.access.Set(cfg.Logging); err != nil {
			return fmt.Errorf("l4 access log: %w", err)
		}
	}
	for _, t := range tcps {
		if px := p.tcp[t.l.Name]; px != nil {
			px.Swap(t.table)
			px.SetProxyTrust(trust)
			continue
		}
		px := l4.NewTCP(l4.TCPOptions{
			Name:             t.l.Name,
			IdleTimeout:      t.l.IdleTimeout.Duration,
			AcceptProxy:      t.l.AcceptProxy,
			HandshakeTimeout: t.l.ReadHeaderTimeout.Duration,
		}, t.table)
		px.SetProxyTrust(trust)
		px.SetAccessLog(&p.access)
		p.tcp[t.l.Name] = px
	}
	for _, u := range udps {
		if px := p.udp[u.l.Name]; px != nil {
			px.SetPool(u.pool)
			continue
		}
		px := l4.NewUDP(l4.UDPOptions{
			Name: u.l.Name, IdleTimeout: u.l.IdleTimeout.Duration, MaxFlows: u.l.MaxFlows, Key: u.key, Persistence: u.persist,
			NewFlowRate: u.l.NewFlowRate, NewFlowBurst: u.l.NewFlowBurst,
		}, u.pool)
		px.SetAccessLog(&p.access)
		p.udp[u.l.Name] = px
	}
	p.cfg = cfg
	return nil
}

// l4Routes are the routes that reach listener l, in order, in l4's terms.
func l4Routes(cfg *config.Config, l config.Listener, pools map[string]*upstream.Pool) ([]l4.Route, error) {
	var out []l4.Route
	for _, r := range cfg.Routes {
		if r.Listener != "" && r.Listener != l.Name {
			continue
		}
		pool := pools[r.Pool]
		var pc *config.Pool
		for i := range cfg.Pools {
			if cfg.Pools[i].Name == r.Pool {
				pc = &cfg.Pools[i]
			}
		}
		if pool == nil || pc == nil {
			return nil, fmt.Errorf("listener %s: route to pool %q, which is not configured", l.Name, r.Pool)
		}
		sp, err := proxyproto.ParseVersion(pc.SendProxy)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", pc.Name, err)
		}
		rt := l4.Route{
			Pool: pool, SendProxy: sp, Persistence: pc.Persistence.Duration,
			ConnectTimeout: pc.Timeouts.Connect.Duration, ConnectAttempts: pc.Retries.Attempts,
		}
		if pc.HashKey.Source == "flow" {
			rt.Key = l4.KeyFlow
		}
		if r.SNI != "" {
			rt.SNI = []string{r.SNI}
		}
		out = append(out, rt)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("listener %s: no route reaches it", l.Name)
	}
	return out, nil
}

// Serve hands the socket to the listener's proxy. A socket closed by a reload or Shutdown
// ends it; the server expects that.
func (p *l4Plane) Serve(listener string, sock Socket) error {
	p.mu.Lock()
	tp, up := p.tcp[listener], p.udp[listener]
	p.mu.Unlock()
	var err error
	switch {
	case tp != nil && sock.Stream != nil:
		err = tp.Serve(sock.Stream)
	case up != nil && sock.Packet != nil:
		err = up.Serve(sock.Packet)
	default:
		_ = sock.Close()
		return fmt.Errorf("l4 plane: no tcp or udp listener %q for this socket", listener)
	}
	if errors.Is(err, l4.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops every proxy, each waiting for its connections or flows until ctx ends.
func (p *l4Plane) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	tcps := make([]*l4.TCP, 0, len(p.tcp))
	for _, t := range p.tcp {
		tcps = append(tcps, t)
	}
	udps := make([]*l4.UDP, 0, len(p.udp))
	for _, u := range p.udp {
		udps = append(udps, u)
	}
	p.mu.Unlock()
	errs := make(chan error, len(tcps)+len(udps))
	for _, t := range tcps {
		go func() { errs <- t.Shutdown(ctx) }()
	}
	for _, u := range udps {
		go func() { errs <- u.Shutdown(ctx) }()
	}
	var all []error
	for range len(tcps) + len(udps) {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// ListenerStats reports every tcp and udp listener of the running configuration.
func (p *l4Plane) ListenerStats() []admin.ListenerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []admin.ListenerStats
	if p.cfg == nil {
		return out
	}
	for _, l := range p.Listeners(p.cfg) {
		st := admin.ListenerStats{Listener: l.Name, Protocol: l.Protocol}
		if t := p.tcp[l.Name]; t != nil {
			s := t.Stats()
			st.Accepted, st.Active, st.ProxyRefused, st.NoRoute = s.Accepted, s.Active, s.ProxyRefused, s.NoRoute
			st.NoBackend, st.IdleClosed, st.Retries = s.NoBackend, s.IdleClosed, s.Retries
			st.Terminations = s.Terminations
		}
		if u := p.udp[l.Name]; u != nil {
			s := u.Stats()
			st.Active, st.Flows, st.FlowsExpired, st.Retries = s.Flows, s.Created, s.Expired, s.Retries
			st.DroppedMaxFlows, st.DroppedNoBackend = s.DroppedCap, s.DroppedNoBackend
			st.Datagrams, st.DroppedDescriptors, st.DroppedRate = s.Datagrams, s.DroppedDescriptors, s.DroppedRate
			st.DroppedSend, st.DroppedOverflow, st.RepliesDropped = s.DroppedSend, s.DroppedOverflow, s.RepliesDropped
			st.Forwarded, st.Replies, st.MaxFlows = s.PacketsIn, s.PacketsOut, u.MaxFlows()
			st.BytesIn, st.BytesOut = s.BytesIn, s.BytesOut
		}
		out = append(out, st)
	}
	return out
}

// Conns sums b's counters over the tcp proxies.
func (p *l4Plane) Conns(b *upstream.Backend) admin.ConnStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var c admin.ConnStats
	for _, t := range p.tcp {
		s := t.BackendStats(b)
		c.Conns += s.Conns
		c.BytesIn += s.BytesIn
		c.BytesOut += s.BytesOut
		c.ConnectFailures += s.ConnectFailures
	}
	return c
}

// ReopenLogs reopens the L4 access log's file (SIGUSR1).
func (p *l4Plane) ReopenLogs() error { return p.access.Reopen() }
