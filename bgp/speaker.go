package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Config is a Speaker's configuration.
type Config struct {
	ASN      uint32
	RouterID netip.Addr
	// ListenPort accepts incoming sessions on this port; -1 accepts none.
	ListenPort int32
	Peers      []Peer
	// HoldTime offered to every peer (keepalives every third of it); default 9s.
	HoldTime time.Duration
	// BFD timers of the peers with BFD: packets every BFDInterval, down after
	// BFDMultiplier intervals without one. Defaults 300ms and 3.
	BFDInterval   time.Duration
	BFDMultiplier int
	// Communities and MED go with every announced route.
	Communities []uint32
	MED         uint32
	Logger      *slog.Logger
}

// Peer is one router.
type Peer struct {
	Addr netip.Addr
	ASN  uint32
	BFD  bool
}

// BFDPort is RFC 5881's single-hop control port, where GoBGP listens and sends.
const BFDPort = 3784

// Speaker is a running BGP speaker. See the package comment.
type Speaker struct {
	cfg Config
	s   *server.BgpServer

	mu        sync.Mutex
	routes    []Route                    // the last list Set was given
	paths     map[netip.Prefix]uuid.UUID // originated paths
	since     map[netip.Prefix]time.Time // when each prefix was last announced or withdrawn
	announces uint64                     // routes originated, withdrawals, over the run
	withdraws uint64
	closed    bool
}

// Start starts the speaker and adds every peer; sessions come up in the background.
func Start(ctx context.Context, c Config) (*Speaker, error) {
	if c.HoldTime == 0 {
		c.HoldTime = 9 * time.Second
	}
	if c.BFDInterval == 0 {
		c.BFDInterval = 300 * time.Millisecond
	}
	if c.BFDMultiplier == 0 {
		c.BFDMultiplier = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if !c.RouterID.Is4() {
		return nil, fmt.Errorf("bgp: router ID %v is not an IPv4 address", c.RouterID)
	}
	lvl := &slog.LevelVar{} // GoBGP logs through ours: peers up and down, BFD expiries
	s := server.NewBgpServer(server.LoggerOption(c.Logger.With("component", "gobgp"), lvl))
	go s.Serve()
	sp := &Speaker{cfg: c, s: s, paths: map[netip.Prefix]uuid.UUID{}, since: map[netip.Prefix]time.Time{}}
	err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: c.ASN, RouterId: c.RouterID.String(), ListenPort: c.ListenPort,
	}})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("bgp: starting: %w", err)
	}
	for _, p := range c.Peers {
		if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: sp.peer(p)}); err != nil {
			s.Stop()
			return nil, fmt.Errorf("bgp: peer %s: %w", p.Addr, err)
		}
	}
	return sp, nil
}

func (sp *Speaker) peer(p Peer) *api.Peer {
	hold := uint64(sp.cfg.HoldTime / time.Second)
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Addr.String(), PeerAsn: p.ASN},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: hold, KeepaliveInterval: max(1, hold/3),
			// A router that is not up yet, or that reset the session, is tried again within a
			// second or two rather than GoBGP's 120 s and 30 s.
			ConnectRetry: 1, IdleHoldTimeAfterReset: 1,
		}},
	}
	if p.BFD {
		us := uint32(sp.cfg.BFDInterval / time.Microsecond)
		ap.Bfd = &api.BfdPeerConfig{
			Enabled: true, Port: BFDPort, DesiredMinimumTxInterval: us, RequiredMinimumReceive: us,
			DetectionMultiplier: uint32(sp.cfg.BFDMultiplier),
		}
	}
	return ap
}

// Set makes the originated routes follow routes: every prefix with Announce is originated (if
// it is not already), every other one withdrawn. It keeps routes for Status.
func (sp *Speaker) Set(routes []Route) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return errors.New("bgp: speaker closed")
	}
	sp.routes = slices.Clone(routes)
	want := map[netip.Prefix]bool{}
	var errs []error
	for _, r := range routes {
		if !r.Announce {
			continue
		}
		want[r.Prefix] = true
		if _, ok := sp.paths[r.Prefix]; ok {
			continue
		}
		p, err := sp.path(r.Prefix)
		if err == nil {
			var res []apiutil.AddPathResponse
			res, err = sp.s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{p}})
			if err == nil && len(res) == 1 {
				sp.paths[r.Prefix] = res[0].UUID
				sp.since[r.Prefix] = time.Now()
				sp.announces++
				sp.cfg.Logger.Info("bgp: announced", "prefix", r.Prefix.String(), "reason", r.Reason)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: announcing %s: %w", r.Prefix, err))
		}
	}
	for pfx, id := range sp.paths {
		if want[pfx] {
			continue
		}
		if err := sp.s.DeletePath(apiutil.DeletePathRequest{UUIDs: []uuid.UUID{id}}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: withdrawing %s: %w", pfx, err))
			continue
		}
		delete(sp.paths, pfx)
		sp.since[pfx] = time.Now()
		sp.withdraws++
		reason := ""
		for _, r := range routes {
			if r.Prefix == pfx {
				reason = r.Reason
			}
		}
		sp.cfg.Logger.Info("bgp: withdrawn", "prefix", pfx.String(), "reason", reason)
	}
	return errors.Join(errs...)
}

// path is the route originated for pfx: origin IGP, next hop our own address (GoBGP puts the
// session's local address on eBGP, and on iBGP for a zero next hop), communities and MED.
func (sp *Speaker) path(pfx netip.Prefix) (*apiutil.Path, error) {
	nlri, err := gbgp.NewIPAddrPrefix(pfx)
	if err != nil {
		return nil, err
	}
	family := gbgp.RF_IPv4_UC
	zero := netip.IPv4Unspecified()
	if pfx.Addr().Is6() {
		family, zero = gbgp.RF_IPv6_UC, netip.IPv6Unspecified()
	}
	attrs := []gbgp.PathAttributeInterface{gbgp.NewPathAttributeOrigin(0)}
	if family == gbgp.RF_IPv4_UC {
		nh, err := gbgp.NewPathAttributeNextHop(zero)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, nh)
	} else {
		mp, err := gbgp.NewPathAttributeMpReachNLRI(family, []gbgp.PathNLRI{{NLRI: nlri}}, zero)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, mp)
	}
	attrs = append(attrs, gbgp.NewPathAttributeMultiExitDisc(sp.cfg.MED))
	if len(sp.cfg.Communities) > 0 {
		attrs = append(attrs, gbgp.NewPathAttributeCommunities(sp.cfg.Communities))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}, nil
}

// Session is one peer's state.
type Session struct {
	Peer  string `json:"peer"`
	ASN   uint32 `json:"asn"`
	State string `json:"state"` // idle, connect, active, opensent, openconfirm, established
	// Since is when the session was established (Uptime counts from it); zero when not.
	Since        time.Time `json:"since,omitzero"`
	Uptime       string    `json:"uptime,omitempty"`
	PrefixesSent uint64    `json:"prefixes_sent"`
	// PrefixesReceived are the router's routes (ignored: the director routes nothing).
	PrefixesReceived uint64 `json:"prefixes_received"`
	UpdatesSent      uint64 `json:"updates_sent"`
	UpdatesReceived  uint64 `json:"updates_received"`
	Flops            uint32 `json:"flops"`
	HoldTime         uint64 `json:"hold_time_seconds"`
	BFD              string `json:"bfd,omitempty"` // up, down, init, admin_down; empty without BFD
	BFDSent          uint64 `json:"bfd_packets_sent,omitempty"`
	BFDReceived      uint64 `json:"bfd_packets_received,omitempty"`
	BFDFailures      uint64 `json:"bfd_failures,omitempty"`
}

// Status is the speaker's state at the call.
type Status struct {
	ASN         uint32    `json:"asn"`
	RouterID    string    `json:"router_id"`
	Sessions    []Session `json:"sessions"`
	Routes      []Route   `json:"routes"`
	Announced   int       `json:"announced"`
	Since       []Changed `json:"changes,omitempty"`
	Announces   uint64    `json:"announcements"`
	Withdrawals uint64    `json:"withdrawals"`
}

// Changed is when a prefix was last announced or withdrawn.
type Changed struct {
	Prefix netip.Prefix `json:"prefix"`
	At     time.Time    `json:"at"`
}

// Status reads the sessions from GoBGP and the routes from the last Set.
func (sp *Speaker) Status(ctx context.Context) Status {
	sp.mu.Lock()
	st := Status{ASN: sp.cfg.ASN, RouterID: sp.cfg.RouterID.String(), Routes: slices.Clone(sp.routes),
		Announced: len(sp.paths), Announces: sp.announces, Withdrawals: sp.withdraws}
	for p, at := range sp.since {
		st.Since = append(st.Since, Changed{p, at})
	}
	closed := sp.closed
	sp.mu.Unlock()
	sort.Slice(st.Since, func(i, j int) bool { return st.Since[i].Prefix.Addr().Less(st.Since[j].Prefix.Addr()) })
	if closed {
		return st
	}
	_ = sp.s.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		st.Sessions = append(st.Sessions, session(p))
	})
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].Peer < st.Sessions[j].Peer })
	return st
}

func session(p *api.Peer) Session {
	s := Session{Peer: p.GetConf().GetNeighborAddress(), ASN: p.GetConf().GetPeerAsn(), State: "idle"}
	ps := p.GetState()
	switch ps.GetSessionState() {
	case api.PeerState_SESSION_STATE_CONNECT:
		s.State = "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		s.State = "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		s.State = "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		s.State = "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		s.State = "established"
	}
	s.Flops = ps.GetFlops()
	s.UpdatesSent = ps.GetMessages().GetSent().GetUpdate()
	s.UpdatesReceived = ps.GetMessages().GetReceived().GetUpdate()
	if ts := p.GetTimers().GetState(); ts != nil {
		s.HoldTime = ts.GetNegotiatedHoldTime()
		if up := ts.GetUptime(); up != nil && s.State == "established" {
			s.Since = up.AsTime()
			s.Uptime = time.Since(s.Since).Round(time.Second).String()
		}
	}
	for _, af := range p.GetAfiSafis() {
		if st := af.GetState(); st != nil {
			s.PrefixesSent += st.GetAdvertised()
			s.PrefixesReceived += st.GetReceived()
		}
	}
	if p.GetBfd().GetEnabled() {
		b := ps.GetBfdState()
		switch b.GetSessionState() {
		case api.BfdSessionState_BFD_SESSION_STATE_UP:
			s.BFD = "up"
		case api.BfdSessionState_BFD_SESSION_STATE_INIT:
			s.BFD = "init"
		case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
			s.BFD = "admin_down"
		default:
			s.BFD = "down"
		}
		s.BFDSent = b.GetBfdAsync().GetTransmittedPackets()
		s.BFDReceived = b.GetBfdAsync().GetReceivedPackets()
		s.BFDFailures = b.GetFailureTransitions()
	}
	return s
}

// Close ends every session (a Cease to each peer: the routers drop the routes at once) and
// stops GoBGP.
func (sp *Speaker) Close() error {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		return nil
	}
	sp.closed = true
	sp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := sp.s.StopBgp(ctx, &api.StopBgpRequest{})
	sp.s.Stop()
	return err
}
