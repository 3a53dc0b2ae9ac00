package director

import (
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/health"
)

// TestHTTPHealthRewritesTable: the health package's HTTP probe, run by the director against
// real servers on loopback addresses, takes a server answering 500 out of the table and puts
// it back when it answers 200 again.
func TestHTTPHealthRewritesTable(t *testing.T) {
	var failing atomic.Bool
	reals := []netip.Addr{netip.MustParseAddr("127.0.0.11"), netip.MustParseAddr("127.0.0.12")}
	ln0, err := net.Listen("tcp4", reals[0].String()+":0")
	must0(t, err)
	port := uint16(ln0.Addr().(*net.TCPAddr).Port)
	ln1, err := net.Listen("tcp4", netip.AddrPortFrom(reals[1], port).String())
	if err != nil {
		t.Skipf("skipping: port %d is taken on %s: %v", port, reals[1], err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	bad := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() && r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	for _, s := range []struct {
		ln net.Listener
		h  http.Handler
	}{{ln0, ok}, {ln1, bad}} {
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: time.Second}
		go srv.Serve(s.ln)
		t.Cleanup(func() { srv.Close() })
	}
	prober, err := health.NewProber(config.HealthCheck{Type: "http", Path: "/healthz", ExpectStatus: "200-299"})
	must0(t, err)
	d := newTestDirector(t, Options{Mode: NAT, TableSize: 251, Health: &HealthCheck{
		Prober: prober, Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 2, Fall: 2,
	}})
	v := VIP{Addr: vipAddr, Port: port, Proto: TCP}
	must0(t, d.SetVIP(v, []Real{{Addr: reals[0], Weight: 1}, {Addr: reals[1], Weight: 1}}))

	waitState := func(want string, slots func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := vipStats(t, d, v).Reals[1]
			if st.State == want && slots(st.Slots) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("real server 1 is %s with %d slots after 5 s, want %s", st.State, st.Slots, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitState(StateUp, func(n int) bool { return n > 0 })
	failing.Store(true)
	waitState(StateDown, func(n int) bool { return n == 0 })
	if st := vipStats(t, d, v).Reals[0]; st.State != StateUp || st.Slots != 251 {
		t.Errorf("the healthy real server is %s with %d of 251 slots", st.State, st.Slots)
	}
	failing.Store(false)
	waitState(StateUp, func(n int) bool { return n > 0 })
}
