package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zone is a tiny authoritative server on loopback (UDP and TCP) whose records a test changes.
type zone struct {
	mu      sync.Mutex
	rrs     map[string][]dns.RR // by "name type"
	rcode   int
	queries map[string]int
	addr    string
}

func startZone(t *testing.T) *zone {
	t.Helper()
	z := &zone{rrs: map[string][]dns.RR{}, queries: map[string]int{}}
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ln == nil; try++ { // the UDP port's TCP twin may be taken: try another
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err != nil {
			pc.Close()
			if try == 10 {
				t.Fatal(err)
			}
		}
	}
	z.addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Compress = true
		q := r.Question[0]
		key := strings.ToLower(q.Name) + " " + dns.TypeToString[q.Qtype]
		z.mu.Lock()
		z.queries[key+" "+w.RemoteAddr().Network()]++
		m.Rcode = z.rcode
		m.Answer = append(m.Answer, z.rrs[key]...)
		if q.Qtype == dns.TypeSRV {
			for _, rr := range z.rrs[key] {
				m.Extra = append(m.Extra, z.rrs[strings.ToLower(rr.(*dns.SRV).Target)+" A+"]...)
			}
		}
		z.mu.Unlock()
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := 512
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		_ = w.WriteMsg(m)
	})
	us := &dns.Server{PacketConn: pc, Handler: h}
	ts := &dns.Server{Listener: ln, Handler: h}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	t.Cleanup(func() { _ = us.Shutdown(); _ = ts.Shutdown() })
	return z
}

func (z *zone) set(records ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rrs = map[string][]dns.RR{}
	for _, s := range records {
		extra := strings.HasPrefix(s, "+")
		rr, err := dns.NewRR(strings.TrimPrefix(s, "+"))
		if err != nil {
			panic(err)
		}
		key := strings.ToLower(rr.Header().Name) + " " + dns.TypeToString[rr.Header().Rrtype]
		if extra { // sent in the additional section of SRV answers only
			key += "+"
		}
		z.rrs[key] = append(z.rrs[key], rr)
	}
}

func (z *zone) setRcode(rc int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rcode = rc
}

func (z *zone) count(key string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries[key]
}

func testDNS(z *zone, typ string) *DNS {
	return &DNS{Name: "api.ballast.test", Type: typ, Port: 8080, Resolvers: []string{z.addr}, MinTTL: time.Second, MaxTTL: time.Minute, Timeout: time.Second, Max: 1000}
}

func backends(a Answer) string {
	var out []string
	for _, b := range a.Backends {
		s := fmt.Sprintf("%s/%d", b.Address, b.Weight)
		if b.Backup {
			s += "/backup"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestDNSSRV: SRV records give addresses, ports and weights; the lowest priority is primary,
// the others backup; targets come from the additional section, or are asked when missing; the
// next resolution is at the smallest TTL, within the bounds.
func TestDNSSRV(t *testing.T) {
	z := startZone(t)
	z.set(
		"api.ballast.test. 30 IN SRV 10 5 8081 b1.ballast.test.",
		"api.ballast.test. 20 IN SRV 10 0 8082 b2.ballast.test.",
		"api.ballast.test. 30 IN SRV 20 1 8083 b3.ballast.test.",
		"api.ballast.test. 30 IN SRV 10 60000 8084 b4.ballast.test.",
		"+b1.ballast.test. 30 IN A 127.0.0.11",
		"b2.ballast.test. 30 IN A 127.0.0.12",
		"b3.ballast.test. 30 IN AAAA ::1",
		"b4.ballast.test. 30 IN A 127.0.0.14",
		"b4.ballast.test. 30 IN A 127.0.0.15",
	)
	d := testDNS(z, TypeSRV)
	a, err := d.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.11:8081/5 127.0.0.12:8082/1 127.0.0.14:8084/10000 127.0.0.15:8084/10000 [::1]:8083/1/backup"
	if got := backends(a); got != want {
		t.Errorf("backends %s\nwant     %s", got, want)
	}
	if a.Next != 20*time.Second {
		t.Errorf("next resolution in %s, want the smallest TTL 20s", a.Next)
	}
	if n := z.count("b1.ballast.test. A udp"); n != 0 {
		t.Errorf("asked %d times for a target the additional section gave", n)
	}
	z.set("api.ballast.test. 0 IN SRV 10 5 8081 b1.ballast.test.", "+b1.ballast.test. 0 IN A 127.0.0.11")
	if a, err := d.Fetch(context.Background()); err != nil || a.Next != time.Second {
		t.Errorf("TTL 0: next %s (%v), want min_ttl 1s", a.Next, err)
	}
	z.set("api.ballast.test. 86400 IN SRV 10 5 8081 b1.ballast.test.", "+b1.ballast.test. 86400 IN A 127.0.0.11")
	if a, err := d.Fetch(context.Background()); err != nil || a.Next != time.Minute {
		t.Errorf("TTL 1d: next %s (%v), want max_ttl 1m", a.Next, err)
	}
}

// TestDNSA: A and AAAA answers give addresses with the pool's port.
func TestDNSA(t *testing.T) {
	z := startZone(t)
	z.set("api.ballast.test. 5 IN A 127.0.0.2", "api.ballast.test. 5 IN A 127.0.0.3", "api.ballast.test. 5 IN AAAA ::1")
	a, err := testDNS(z, TypeA).Fetch(context.Background())
	if got := backends(a); err != nil || got != "127.0.0.2:8080/1 127.0.0.3:8080/1" || a.Next != 5*time.Second {
		t.Errorf("A: %s next %s (%v)", got, a.Next, err)
	}
	a, err = testDNS(z, TypeAAAA).Fetch(context.Background())
	if got := backends(a); err != nil || got != "[::1]:8080/1" {
		t.Errorf("AAAA: %s (%v)", got, err)
	}
}

// TestDNSFailures: NXDOMAIN, SERVFAIL and no records are errors (the Syncer keeps the last
// good set); a dead resolver is skipped for the next one.
func TestDNSFailures(t *testing.T) {
	z := startZone(t)
	d := testDNS(z, TypeA)
	if _, err := d.Fetch(context.Background()); !errors.Is(err, ErrEmpty) {
		t.Errorf("no records: %v, want ErrEmpty", err)
	}
	z.setRcode(dns.RcodeNameError)
	if _, err := d.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "NXDOMAIN") {
		t.Errorf("NXDOMAIN: %v", err)
	}
	z.setRcode(dns.RcodeServerFailure)
	if _, err := d.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Errorf("SERVFAIL: %v", err)
	}
	z.setRcode(dns.RcodeSuccess)
	z.set("api.ballast.test. 5 IN A 127.0.0.2")
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // bound, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	d.Resolvers = []string{dead.LocalAddr().String(), z.addr}
	d.Timeout = 200 * time.Millisecond
	a, err := d.Fetch(context.Background())
	if got := backends(a); err != nil || got != "127.0.0.2:8080/1" {
		t.Errorf("after a dead resolver: %s (%v)", got, err)
	}
	d.Resolvers = []string{dead.LocalAddr().String()}
	if _, err := d.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("every resolver dead: %v", err)
	}
}

// TestDNSFlood: the largest answer one DNS message can carry (4,000 A records, 64 KiB, over
// TCP after a truncated UDP answer) is cut to max_backends and the cut is counted; an SRV flood
// asks for at most max_backends targets.
func TestDNSFlood(t *testing.T) {
	z := startZone(t)
	var rrs []string
	for i := range 4000 {
		rrs = append(rrs, fmt.Sprintf("api.ballast.test. 5 IN A 10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
	}
	z.set(rrs...)
	d := testDNS(z, TypeA)
	a, err := d.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Backends) != 1000 || a.Truncated != 3000 {
		t.Errorf("%d backends, %d truncated; want 1000 and 3000", len(a.Backends), a.Truncated)
	}
	if z.count("api.ballast.test. A tcp") != 1 {
		t.Errorf("the truncated answer was not asked again over TCP: %v", z.queries)
	}

	rrs = nil
	for i := range 1500 {
		rrs = append(rrs, fmt.Sprintf("api.ballast.test. 5 IN SRV 10 1 80 t%d.ballast.test.", i))
	}
	z.set(rrs...)
	d = testDNS(z, TypeSRV)
	d.Max, d.Timeout = 50, 200*time.Millisecond
	_, err = d.Fetch(context.Background())
	if !errors.Is(err, ErrEmpty) {
		t.Errorf("SRV targets without addresses: %v, want ErrEmpty", err)
	}
	asked := 0
	z.mu.Lock()
	for k, n := range z.queries {
		if strings.HasPrefix(k, "t") {
			asked += n
		}
	}
	z.mu.Unlock()
	if asked == 0 || asked > 2*50 {
		t.Errorf("asked %d target queries for 1500 SRV records, want at most 2 per kept record (50)", asked)
	}
}

// TestDNSPoll: Poll applies answers at the TTL and keeps the last good set through failures.
func TestDNSPoll(t *testing.T) {
	z := startZone(t)
	z.set("api.ballast.test. 0 IN A 127.0.0.2")
	d := testDNS(z, TypeA)
	d.MinTTL, d.MaxTTL = 100*time.Millisecond, 100*time.Millisecond
	p := newTestPool(t, 0)
	s := NewSyncer("api", d.String(), 10, nil)
	s.SetPool(p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Poll(ctx, d)
	go s.Run(ctx)
	waitFor(t, func() bool { return p.Backend("127.0.0.2:8080") != nil })
	z.set("api.ballast.test. 0 IN A 127.0.0.3")
	waitFor(t, func() bool { return p.Backend("127.0.0.3:8080") != nil && p.Backend("127.0.0.2:8080") == nil })
	z.setRcode(dns.RcodeServerFailure)
	waitFor(t, func() bool { return s.Status().Stale })
	if p.Backend("127.0.0.3:8080") == nil {
		t.Error("a failed answer took the last good backend away")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
