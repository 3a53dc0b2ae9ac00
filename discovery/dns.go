package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"ballast/upstream"
)

// DNS record types a DNS source asks for.
const (
	TypeSRV  = "srv"
	TypeA    = "a"
	TypeAAAA = "aaaa"
)

// maxSRVWeight is the largest weight a backend may have (config's bound); SRV weights go to
// 65535 and are capped.
const maxSRVWeight = 10000

// targetWorkers bounds the concurrent A/AAAA queries for SRV targets the answer's additional
// section did not resolve.
const targetWorkers = 8

// DNS is a DNS source: it resolves Name and turns the records into backends.
type DNS struct {
	Name      string
	Type      string // TypeSRV, TypeA or TypeAAAA
	Port      int    // the backends' port for A and AAAA answers
	Resolvers []string
	MinTTL    time.Duration
	MaxTTL    time.Duration
	Timeout   time.Duration
	Max       int // max_backends: records beyond it are cut
}

// String describes the source for the status page.
func (d *DNS) String() string { return "dns " + d.Type + " " + d.Name }

// Retry is the wait after a failed resolution: min_ttl.
func (d *DNS) Retry() time.Duration { return d.MinTTL }

// Fetch resolves the name once. A failure (every resolver failed or refused, NXDOMAIN) is an
// error; an answer without usable records is ErrEmpty. Next is the smallest TTL of the records
// used, within [MinTTL, MaxTTL].
func (d *DNS) Fetch(ctx context.Context) (Answer, error) {
	fqdn := dns.Fqdn(d.Name)
	switch d.Type {
	case TypeA, TypeAAAA:
		qt := dns.TypeA
		if d.Type == TypeAAAA {
			qt = dns.TypeAAAA
		}
		resp, err := d.query(ctx, fqdn, qt)
		if err != nil {
			return Answer{}, err
		}
		addrs, ttl := addresses(resp.Answer, qt)
		var a Answer
		for _, ip := range addrs {
			if len(a.Backends) == d.Max {
				a.Truncated = len(addrs) - d.Max
				break
			}
			ap := netip.AddrPortFrom(ip, uint16(d.Port)).String()
			a.Backends = append(a.Backends, upstream.BackendSpec{ID: ap, Address: ap, Weight: 1})
		}
		if len(a.Backends) == 0 {
			return Answer{}, ErrEmpty
		}
		a.Next = d.clamp(ttl)
		return a, nil
	default:
		return d.fetchSRV(ctx, fqdn)
	}
}

func (d *DNS) clamp(ttl uint32) time.Duration {
	return min(max(time.Duration(ttl)*time.Second, d.MinTTL), d.MaxTTL)
}

func (d *DNS) fetchSRV(ctx context.Context, fqdn string) (Answer, error) {
	resp, err := d.query(ctx, fqdn, dns.TypeSRV)
	if err != nil {
		return Answer{}, err
	}
	var srvs []*dns.SRV
	ttl := uint32(1<<32 - 1)
	for _, rr := range resp.Answer {
		if s, ok := rr.(*dns.SRV); ok && s.Port != 0 && s.Target != "." {
			srvs = append(srvs, s)
			ttl = min(ttl, s.Hdr.Ttl)
		}
	}
	if len(srvs) == 0 {
		return Answer{}, ErrEmpty
	}
	// RFC 2782: the lowest priority is tried first; Ballast's pools have two tiers, so the
	// lowest priority is primary and every other one backup.
	slices.SortStableFunc(srvs, func(a, b *dns.SRV) int { return cmp.Compare(a.Priority, b.Priority) })
	var a Answer
	if len(srvs) > d.Max {
		a.Truncated = len(srvs) - d.Max
		srvs = srvs[:d.Max]
	}
	// Targets: from the additional section when the resolver sent their addresses, else asked.
	byTarget := map[string][]netip.Addr{}
	for _, rr := range resp.Extra {
		switch r := rr.(type) {
		case *dns.A:
			if ip, ok := netip.AddrFromSlice(r.A.To4()); ok {
				byTarget[strings.ToLower(r.Hdr.Name)] = append(byTarget[strings.ToLower(r.Hdr.Name)], ip)
				ttl = min(ttl, r.Hdr.Ttl)
			}
		case *dns.AAAA:
			if ip, ok := netip.AddrFromSlice(r.AAAA); ok {
				byTarget[strings.ToLower(r.Hdr.Name)] = append(byTarget[strings.ToLower(r.Hdr.Name)], ip)
				ttl = min(ttl, r.Hdr.Ttl)
			}
		}
	}
	var missing []string
	for _, s := range srvs {
		t := strings.ToLower(s.Target)
		if _, ok := byTarget[t]; !ok && !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		got, tttl := d.resolveTargets(ctx, missing)
		for t, ips := range got {
			byTarget[t] = ips
		}
		ttl = min(ttl, tttl)
	}
	primary := srvs[0].Priority
	seen := map[string]bool{}
	for _, s := range srvs {
		for _, ip := range byTarget[strings.ToLower(s.Target)] {
			ap := netip.AddrPortFrom(ip, s.Port).String()
			if seen[ap] {
				continue
			}
			seen[ap] = true
			if len(a.Backends) == d.Max {
				a.Truncated++
				continue
			}
			// Weight 0 means "rarely" in SRV but "no new traffic" in Ballast: it counts as 1.
			w := min(max(int(s.Weight), 1), maxSRVWeight)
			a.Backends = append(a.Backends, upstream.BackendSpec{ID: ap, Address: ap, Weight: w, Backup: s.Priority != primary})
		}
	}
	if len(a.Backends) == 0 {
		return Answer{}, fmt.Errorf("%w: no SRV target resolved to an address", ErrEmpty)
	}
	a.Next = d.clamp(ttl)
	return a, nil
}

// resolveTargets asks for the A records of each target (AAAA when it has none), a few at once.
func (d *DNS) resolveTargets(ctx context.Context, targets []string) (map[string][]netip.Addr, uint32) {
	var mu sync.Mutex
	out := map[string][]netip.Addr{}
	ttl := uint32(1<<32 - 1)
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(targetWorkers, len(targets)) {
		wg.Go(func() {
			for t := range work {
				var ips []netip.Addr
				var tt uint32
				for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
					resp, err := d.query(ctx, t, qt)
					if err != nil {
						continue
					}
					ips, tt = addresses(resp.Answer, qt)
					if len(ips) > 0 {
						break
					}
				}
				mu.Lock()
				if len(ips) > 0 {
					out[t] = ips
					ttl = min(ttl, tt)
				}
				mu.Unlock()
			}
		})
	}
	for _, t := range targets {
		work <- t
	}
	close(work)
	wg.Wait()
	return out, ttl
}

// addresses collects the A or AAAA records of an answer (a CNAME chain's end included) and
// their smallest TTL.
func addresses(rrs []dns.RR, qt uint16) ([]netip.Addr, uint32) {
	var out []netip.Addr
	ttl := uint32(1<<32 - 1)
	for _, rr := range rrs {
		var ip netip.Addr
		var ok bool
		switch r := rr.(type) {
		case *dns.A:
			if qt == dns.TypeA {
				ip, ok = netip.AddrFromSlice(r.A.To4())
			}
		case *dns.AAAA:
			if qt == dns.TypeAAAA {
				ip, ok = netip.AddrFromSlice(r.AAAA)
			}
		}
		if ok && !slices.Contains(out, ip) {
			out = append(out, ip)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	return out, ttl
}

// errRcode is a resolver's refusal (NXDOMAIN, SERVFAIL, REFUSED ...).
type errRcode struct {
	resolver string
	rcode    int
}

func (e errRcode) Error() string {
	return fmt.Sprintf("resolver %s answered %s", e.resolver, dns.RcodeToString[e.rcode])
}

// query asks each resolver in turn until one answers: over UDP with EDNS0 (4096 bytes), again
// over TCP when the answer is truncated. NXDOMAIN is an answer (every resolver would say it).
func (d *DNS) query(ctx context.Context, name string, qt uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qt)
	m.SetEdns0(4096, false)
	var errs []error
	for _, r := range d.Resolvers {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		resp, err := d.exchange(ctx, "udp", m, r)
		if err == nil && resp.Truncated {
			resp, err = d.exchange(ctx, "tcp", m, r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("resolver %s: %w", r, err))
			continue
		}
		switch resp.Rcode {
		case dns.RcodeSuccess:
			return resp, nil
		case dns.RcodeNameError:
			return nil, errRcode{r, resp.Rcode}
		default:
			errs = append(errs, errRcode{r, resp.Rcode})
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("no resolvers")
	}
	return nil, errors.Join(errs...)
}

func (d *DNS) exchange(ctx context.Context, network string, m *dns.Msg, resolver string) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: d.Timeout, UDPSize: 4096}
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	m.Id = dns.Id()
	resp, _, err := c.ExchangeContext(ctx, m, resolver)
	if err != nil {
		return nil, err
	}
	if resp.Id != m.Id {
		return nil, errors.New("answer ID does not match the query")
	}
	return resp, nil
}
