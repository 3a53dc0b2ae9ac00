package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestHTTP2FloodCounted: a client that opens and resets streams without end (rapid reset) on
// an h2c listener is disconnected, and /metrics says why: ballast_http2_events_total counts
// the reset flood and the connection error, ballast_http2_streams_total the streams opened.
func TestHTTP2FloodCounted(t *testing.T) {
	be := namedBackend(t, "a")
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, backends: [{address: %q}]}]
admin: {address: "127.0.0.1:0"}
`, be))
	c, err := net.DialTimeout("tcp", s.Addr("web").String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block strings.Builder
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.test"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	ended := make(chan error, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				ended <- err
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok && g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				ended <- fmt.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
				return
			}
		}
	}()
	opened := 0
	for id := uint32(1); opened < 20000; id += 2 {
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(block.String()), EndStream: true, EndHeaders: true}) != nil ||
			fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
		opened++
	}
	select {
	case err := <-ended:
		if err != nil && strings.Contains(err.Error(), "want ENHANCE_YOUR_CALM") {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still connected after opening and resetting %d streams", opened)
	}
	metric := func(body, name string) string {
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		return ""
	}
	var body string
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body = get(t, "http://"+s.AdminAddr()+"/metrics")
		if metric(body, `ballast_http2_events_total{event="reset_flood"}`) == "1" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, want := range map[string]string{
		`ballast_http2_events_total{event="reset_flood"}`:  "1",
		`ballast_http2_events_total{event="conn_error"}`:   "1",
		`ballast_http2_events_total{event="ping_timeout"}`: "0",
	} {
		if got := metric(body, name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
	var streams int
	if _, err := fmt.Sscan(metric(body, "ballast_http2_streams_total"), &streams); err != nil || streams < 100 || streams > opened {
		t.Errorf("ballast_http2_streams_total = %d (%v), want between the reset budget and the %d opened", streams, err, opened)
	}
}
