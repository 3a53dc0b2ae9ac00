package director

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Sync shares a director's flows with other directors over UDP, as LVS's sync daemon does: the
// flows the program places go out in batches to the peers, and the flows peers send are
// installed in this director's connection table (InstallFlows), so that a flow keeps its real
// server whichever director its packets reach next (a failover, or several active directors).
// A director that starts asks its peers for their flows (RequestDump); a sending one answers
// with every active flow of its table.
//
// Everything is bounded: at most SyncOptions.MaxQueue flows wait to be sent (more are dropped
// and counted), a datagram carries at most syncBatch flows, a dump at most MaxQueue flows.
//
// The datagram: "BF", version 1, type (1 flows, 2 dump request), count (16 bits, big
// endian), two reserved bytes; then count entries of 20 bytes: client address and VIP address
// (4 each), client port and VIP port (2 each, big endian), protocol, three zero bytes, real
// server address (4). There is no authentication: like VRRP, flow sync needs a segment only
// trusted hosts reach, and Accept names the peers whose datagrams are taken.
type Sync struct {
	d       *Director
	o       SyncOptions
	ev      *FlowEvents
	sending atomic.Bool
	dump    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	stats   syncCounters
}

// SyncOptions configure a Sync.
type SyncOptions struct {
	// Conn is the bound socket; the Sync reads and writes it and closes it at Close.
	Conn *net.UDPConn
	// Peers are where flows and dump requests go: each other director, or one multicast
	// group (the caller joins it on Conn).
	Peers []netip.AddrPort
	// Accept says whose datagrams are taken; nil takes every one.
	Accept func(from netip.Addr) bool
	// MaxQueue bounds the flows waiting to be sent and a dump's size; default 65536.
	MaxQueue int
	// Delay is how long a flow may wait for a fuller datagram; default 2 ms.
	Delay  time.Duration
	Logger *slog.Logger
}

// SyncStats counts a Sync's work.
type SyncStats struct {
	FlowsSent     uint64 `json:"flows_sent"`
	Datagrams     uint64 `json:"datagrams_sent"`
	Dropped       uint64 `json:"flows_dropped"` // the queue was full, or a send failed
	FlowsReceived uint64 `json:"flows_received"`
	Installed     uint64 `json:"flows_installed"`
	UnknownVIP    uint64 `json:"unknown_vip"`
	UnknownReal   uint64 `json:"unknown_real"`
	BadDatagrams  uint64 `json:"bad_datagrams"` // malformed, or from a source not accepted
	DumpsSent     uint64 `json:"dumps_sent"`
	DumpRequests  uint64 `json:"dump_requests_received"`
}

type syncCounters struct {
	sent, datagrams, dropped, received, installed, unknownVIP, unknownReal, bad, dumps, requests atomic.Uint64
}

const (
	syncMagic0, syncMagic1 = 'B', 'F'
	syncVersion            = 1
	syncTypeFlows          = 1
	syncTypeDumpRequest    = 2
	syncHeader             = 8
	syncEntry              = 20
	// syncBatch flows fit a datagram well under a 1500-byte MTU: 8 + 64 × 20 = 1288 bytes.
	syncBatch = 64
)

// NewSync starts sharing d's flows (d must have no other FlowEvents reader). It starts not
// sending: call SetSending(true) on the director whose flows are authoritative.
func NewSync(d *Director, o SyncOptions) (*Sync, error) {
	if o.Conn == nil {
		return nil, errors.New("director: sync without a socket")
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 65536
	}
	if o.Delay <= 0 {
		o.Delay = 2 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ev, err := d.FlowEvents()
	if err != nil {
		return nil, err
	}
	s := &Sync{d: d, o: o, ev: ev, dump: make(chan struct{}, 1), stop: make(chan struct{})}
	s.wg.Add(2)
	go s.send()
	go s.receive()
	return s, nil
}

// SetSending turns the sending of this director's new flows (and answers to dump requests)
// on or off. Off, its new flows are read and discarded; received flows are installed either
// way.
func (s *Sync) SetSending(on bool) { s.sending.Store(on) }

// Sending reports whether SetSending(true) is in force.
func (s *Sync) Sending() bool { return s.sending.Load() }

// RequestDump asks the peers for their active flows.
func (s *Sync) RequestDump() {
	b := []byte{syncMagic0, syncMagic1, syncVersion, syncTypeDumpRequest, 0, 0, 0, 0}
	for _, p := range s.o.Peers {
		if _, err := s.o.Conn.WriteToUDPAddrPort(b, p); err != nil {
			s.o.Logger.Debug("director sync: dump request", "peer", p, "err", err)
		}
	}
}

// Stats returns the counters.
func (s *Sync) Stats() SyncStats {
	c := &s.stats
	return SyncStats{
		FlowsSent: c.sent.Load(), Datagrams: c.datagrams.Load(), Dropped: c.dropped.Load(),
		FlowsReceived: c.received.Load(), Installed: c.installed.Load(), UnknownVIP: c.unknownVIP.Load(),
		UnknownReal: c.unknownReal.Load(), BadDatagrams: c.bad.Load(), DumpsSent: c.dumps.Load(), DumpRequests: c.requests.Load(),
	}
}

// Close stops the Sync and closes its socket and flow reports.
func (s *Sync) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		err = errors.Join(s.o.Conn.Close(), s.ev.Close())
		s.wg.Wait()
	})
	return err
}

// send reads the program's new flows and sends them in batches, and answers dump requests.
func (s *Sync) send() {
	defer s.wg.Done()
	var queue, buf []Flow
	var oldest time.Time
	out := make([]byte, 0, syncHeader+syncBatch*syncEntry)
	for {
		select {
		case <-s.stop:
			return
		case <-s.dump:
			if s.sending.Load() {
				flows, err := s.d.Flows(s.o.MaxQueue)
				if err != nil {
					s.o.Logger.Warn("director sync: reading the connection table for a dump", "err", err)
				}
				queue = s.enqueue(queue, flows)
				if len(flows) > 0 && oldest.IsZero() {
					oldest = time.Now()
				}
				s.stats.dumps.Add(1)
			}
		default:
		}
		deadline := time.Now().Add(100 * time.Millisecond)
		if len(queue) > 0 {
			deadline = oldest.Add(s.o.Delay)
		}
		var err error
		buf, err = s.ev.Read(buf[:0], deadline)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			select {
			case <-s.stop:
				return
			default:
			}
			if errors.Is(err, os.ErrClosed) {
				return
			}
		}
		if s.sending.Load() && len(buf) > 0 {
			if len(queue) == 0 {
				oldest = time.Now()
			}
			queue = s.enqueue(queue, buf)
		}
		// Full datagrams go at once; a part-filled one when its oldest flow waited Delay.
		for len(queue) >= syncBatch || (len(queue) > 0 && time.Since(oldest) >= s.o.Delay) {
			n := min(len(queue), syncBatch)
			s.write(out, queue[:n])
			queue = queue[:copy(queue, queue[n:])]
			oldest = time.Now()
		}
	}
}

func (s *Sync) enqueue(queue, flows []Flow) []Flow {
	room := s.o.MaxQueue - len(queue)
	if room < len(flows) {
		s.stats.dropped.Add(uint64(len(flows) - max(room, 0)))
		flows = flows[:max(room, 0)]
	}
	return append(queue, flows...)
}

func (s *Sync) write(out []byte, flows []Flow) {
	out = appendFlows(out[:0], flows)
	for _, p := range s.o.Peers {
		if _, err := s.o.Conn.WriteToUDPAddrPort(out, p); err != nil {
			s.stats.dropped.Add(uint64(len(flows)))
			s.o.Logger.Debug("director sync: sending flows", "peer", p, "err", err)
			continue
		}
		s.stats.datagrams.Add(1)
		s.stats.sent.Add(uint64(len(flows)))
	}
}

// appendFlows appends one flows datagram.
func appendFlows(b []byte, flows []Flow) []byte {
	b = append(b, syncMagic0, syncMagic1, syncVersion, syncTypeFlows)
	b = binary.BigEndian.AppendUint16(b, uint16(len(flows)))
	b = append(b, 0, 0)
	for _, f := range flows {
		c, v, r := f.Client.Addr().As4(), f.VIP.Addr().As4(), f.Real.As4()
		b = append(b, c[:]...)
		b = append(b, v[:]...)
		b = binary.BigEndian.AppendUint16(b, f.Client.Port())
		b = binary.BigEndian.AppendUint16(b, f.VIP.Port())
		b = append(b, uint8(f.Proto), 0, 0, 0)
		b = append(b, r[:]...)
	}
	return b
}

var errSyncDatagram = errors.New("director sync: malformed datagram")

// parseSync reads a datagram: its type and, for flows, the flows appended to buf.
func parseSync(b []byte, buf []Flow) (uint8, []Flow, error) {
	if len(b) < syncHeader || b[0] != syncMagic0 || b[1] != syncMagic1 || b[2] != syncVersion {
		return 0, buf, errSyncDatagram
	}
	typ, n := b[3], int(binary.BigEndian.Uint16(b[4:]))
	switch typ {
	case syncTypeDumpRequest:
		if n != 0 || len(b) != syncHeader {
			return 0, buf, errSyncDatagram
		}
		return typ, buf, nil
	case syncTypeFlows:
	default:
		return 0, buf, errSyncDatagram
	}
	if n > syncBatch || len(b) != syncHeader+n*syncEntry {
		return 0, buf, errSyncDatagram
	}
	for i := range n {
		e := b[syncHeader+i*syncEntry:]
		proto := Proto(e[12])
		c, v, r := netip.AddrFrom4([4]byte(e[0:4])), netip.AddrFrom4([4]byte(e[4:8])), netip.AddrFrom4([4]byte(e[16:20]))
		if (proto != TCP && proto != UDP) || e[13]|e[14]|e[15] != 0 || !v.IsGlobalUnicast() || !r.IsGlobalUnicast() {
			return 0, buf, errSyncDatagram
		}
		buf = append(buf, Flow{
			Client: netip.AddrPortFrom(c, binary.BigEndian.Uint16(e[8:])),
			VIP:    netip.AddrPortFrom(v, binary.BigEndian.Uint16(e[10:])),
			Proto:  proto, Real: r,
		})
	}
	return typ, buf, nil
}

// receive installs the flows peers send and passes their dump requests to send.
func (s *Sync) receive() {
	defer s.wg.Done()
	b := make([]byte, 2048)
	var flows []Flow
	for {
		n, from, err := s.o.Conn.ReadFromUDPAddrPort(b)
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if s.o.Accept != nil && !s.o.Accept(from.Addr().Unmap()) {
			s.stats.bad.Add(1)
			continue
		}
		typ, fs, err := parseSync(b[:n], flows[:0])
		flows = fs
		if err != nil {
			s.stats.bad.Add(1)
			continue
		}
		if typ == syncTypeDumpRequest {
			s.stats.requests.Add(1)
			select {
			case s.dump <- struct{}{}:
			default: // one is pending already
			}
			continue
		}
		s.stats.received.Add(uint64(len(flows)))
		res, err := s.d.InstallFlows(flows)
		if err != nil {
			s.o.Logger.Warn("director sync: installing flows", "err", err)
		}
		s.stats.installed.Add(uint64(res.Installed))
		s.stats.unknownVIP.Add(uint64(res.UnknownVIP))
		s.stats.unknownReal.Add(uint64(res.UnknownReal))
	}
}
