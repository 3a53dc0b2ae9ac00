package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// maxBody bounds how much of a probe's response body is read for expect_body.
const maxBody = 64 << 10

// Prober runs one health probe against an address.
type Prober interface {
	Probe(ctx context.Context, address string) error
}

// NewProber builds the probe a health_check section describes.
func NewProber(hc config.HealthCheck) (Prober, error) {
	if hc.Type == "tcp" {
		return tcpProber{}, nil
	}
	ranges, err := config.StatusRanges(hc.ExpectStatus)
	if err != nil {
		return nil, err
	}
	method := hc.Method
	if method == "" {
		method = http.MethodGet
	}
	path := hc.Path
	if path == "" {
		path = "/"
	}
	return &httpProber{
		method: method, path: path, host: hc.Host, ranges: ranges, body: hc.ExpectBody,
		client: &http.Client{
			// A fresh connection per probe: a check must see that the backend accepts
			// connections, not that an old keep-alive connection still works.
			Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}, nil
}

type tcpProber struct{}

func (tcpProber) Probe(ctx context.Context, address string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	return c.Close()
}

type httpProber struct {
	method, path, host, body string
	ranges                   [][2]int
	client                   *http.Client
}

func (h *httpProber) Probe(ctx context.Context, address string) error {
	req, err := http.NewRequestWithContext(ctx, h.method, "http://"+address+h.path, nil)
	if err != nil {
		return err
	}
	if h.host != "" {
		req.Host = h.host
	}
	req.Header.Set("User-Agent", "ballast-health-check")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if !inRanges(resp.StatusCode, h.ranges) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if h.body == "" {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("reading body: %w", err)
	}
	if !strings.Contains(string(b), h.body) {
		return fmt.Errorf("status %d, body lacks %q", resp.StatusCode, h.body)
	}
	return nil
}

func inRanges(code int, ranges [][2]int) bool {
	for _, r := range ranges {
		if code >= r[0] && code <= r[1] {
			return true
		}
	}
	return false
}

// active is one pool's scheduler. Its state is owned by the run goroutine; probes run in
// goroutines of their own and send their result back.
type active struct {
	m      *Monitor
	r      *poolRun
	prober Prober
	hc     config.HealthCheck
	states map[string]*probeState
}

// probeState is the rise/fall bookkeeping of one backend.
type probeState struct {
	b        *upstream.Backend
	up       bool
	passes   int
	fails    int
	next     time.Time
	inFlight bool
}

type probeResult struct {
	id  string
	b   *upstream.Backend
	res Result
}

func newActive(m *Monitor, r *poolRun) (*active, error) {
	var pr Prober
	var err error
	if r.hc.Type == "grpc" {
		pr, err = newGRPCProber(r.hc, r.via)
	} else {
		pr, err = NewProber(r.hc)
	}
	if err != nil {
		return nil, err
	}
	return &active{m: m, r: r, prober: pr, hc: r.hc, states: map[string]*probeState{}}, nil
}

func (a *active) interval(up bool) time.Duration {
	if !up && a.hc.DownInterval.Duration > 0 {
		return a.hc.DownInterval.Duration
	}
	return a.hc.Interval.Duration
}

func (a *active) run(ctx context.Context) {
	results := make(chan probeResult)
	inFlight := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := a.m.opts.Now()
		a.sync(now)
		next := now.Add(a.hc.Interval.Duration) // wake at least once per interval to see additions
		for id, st := range a.states {
			if st.inFlight {
				continue
			}
			if !st.next.After(now) {
				st.inFlight = true
				inFlight++
				go a.probe(ctx, id, st.b, results)
				continue
			}
			if st.next.Before(next) {
				next = st.next
			}
		}
		timer.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			for ; inFlight > 0; inFlight-- {
				<-results
			}
			return
		case pr := <-results:
			inFlight--
			a.apply(pr)
		case <-timer.C:
		case <-a.r.kick:
		}
	}
}

// sync adds backends that appeared (first probe at a random point of the first interval) and
// forgets those that left the pool.
func (a *active) sync(now time.Time) {
	p := a.r.pool.Load()
	bs := p.Backends()
	seen := make(map[string]bool, len(bs))
	for _, b := range bs {
		seen[b.ID] = true
		st := a.states[b.ID]
		if st != nil && st.b == b {
			continue
		}
		jitter := time.Duration(rand.Int64N(int64(a.hc.Interval.Duration) + 1))
		a.states[b.ID] = &probeState{b: b, up: b.Healthy(), next: now.Add(jitter), inFlight: st != nil && st.inFlight}
	}
	for id, st := range a.states {
		if !seen[id] && !st.inFlight {
			delete(a.states, id)
		}
	}
}

func (a *active) probe(ctx context.Context, id string, b *upstream.Backend, out chan<- probeResult) {
	start := a.m.opts.Now()
	pctx, cancel := context.WithTimeout(ctx, a.hc.Timeout.Duration)
	err := a.prober.Probe(pctx, b.Address)
	cancel()
	res := Result{At: start, OK: err == nil, Took: a.m.opts.Now().Sub(start), Detail: "ok"}
	if err != nil {
		res.Detail = describe(err)
	}
	out <- probeResult{id: id, b: b, res: res}
}

// describe shortens a probe error for the status page and logs.
func describe(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

// apply updates rise/fall counters with one result and tells the pool about transitions.
func (a *active) apply(pr probeResult) {
	rec := a.m.record(a.r.name, pr.id, true)
	res := pr.res
	rec.last.Store(&res)
	if !res.OK {
		rec.probeFail.Add(1)
	}
	if a.m.opts.OnProbe != nil {
		a.m.opts.OnProbe(a.r.name, pr.id, res)
	}
	st := a.states[pr.id]
	if st == nil {
		return // removed while the probe ran
	}
	if st.b != pr.b { // replaced by a backend with the same ID: its first probe may go now
		st.inFlight = false
		return
	}
	st.inFlight = false
	if res.OK {
		st.fails = 0
		if !st.up {
			st.passes++
			if st.passes >= a.hc.Rise {
				st.up, st.passes = true, 0
				a.set(pr.id, true, res.Detail)
			}
		}
	} else {
		st.passes = 0
		if st.up {
			st.fails++
			if st.fails >= a.hc.Fall {
				st.up, st.fails = false, 0
				a.set(pr.id, false, res.Detail)
			}
		}
	}
	st.next = res.At.Add(a.interval(st.up))
}

func (a *active) set(id string, up bool, detail string) {
	p := a.r.pool.Load()
	if err := p.SetHealthy(id, up); err != nil {
		if errors.Is(err, upstream.ErrUnknownBackend) {
			return // removed while the probe ran
		}
		a.m.log.Warn("health verdict not applied", "pool", a.r.name, "backend", id, "error", err)
		return
	}
	k := Down
	if up {
		k = Up
	}
	a.m.emit(Event{Pool: a.r.name, Backend: id, Kind: k, Detail: detail})
}
