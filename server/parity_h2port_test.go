package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// h2only are the transports that speak HTTP/2.
var h2only = []string{"h2", "h2c", "h2-proxy"}

// bigFields is n request fields of 1000 bytes each: each fits a header list of 4096 bytes,
// together they do not.
func bigFields(n int) [][2]string {
	var f [][2]string
	for i := range n {
		f = append(f, [2]string{fmt.Sprintf("X-Big-%d", i), strings.Repeat("a", 1000)})
	}
	return f
}

// grpcReq is a gRPC call (an empty message) to target, with a grpc-timeout when timeout is set.
func grpcReq(target, timeout string) preq {
	h := [][2]string{{"Content-Type", "application/grpc"}, {"Te", "trailers"}}
	if timeout != "" {
		h = append(h, [2]string{"Grpc-Timeout", timeout})
	}
	return preq{method: "POST", target: target, header: h, body: "\x00\x00\x00\x00\x00"}
}

// h2portCases are cases of the goroutine HTTP/2 plane's tests (package h2proxy) that hold for
// every transport that offers them, kept here so that they run over each when h2proxy is gone
// (h1/ported_h2_*_test.go has the rest, on the engine alone): how each way an HTTP/1.1
// backend's response can be framed reaches the client (TestHTTP1BackendExchange), a head over
// max_header_bytes and a malformed HTTP/2 request refused and logged (TestH2HeaderListTooLarge,
// TestRefusedRequestsLogged), a Cookie field as sent (found by h1's FuzzH2Request1), and gRPC calls that Ballast answers itself
// (TestGRPCFailureStatuses: no backend 14, no route 12, the grpc-timeout passing 4 with the
// backend's request cancelled). TestParity runs them with parityCases.
var h2portCases = []parityCase{
	{
		// One backend per framing (a backend gives one answer), routed by path.
		name: "response framings of an HTTP/1.1 backend",
		yaml: `
routes:
  - {path_prefix: /chunked, pool: chunked}
  - {path_prefix: /nocontent, pool: nocontent}
  - {path_prefix: /plain, pool: plain}
  - {path_prefix: /cookies, pool: cookies}
  - {path_prefix: /bad, pool: bad}
pools:
  - {name: chunked, backends: [{address: "{B0}"}]}
  - {name: nocontent, backends: [{address: "{B1}"}]}
  - {name: plain, backends: [{address: "{B2}"}]}
  - {name: cookies, backends: [{address: "{B3}"}]}
  - {name: bad, backends: [{address: "{B4}"}]}
`,
		backends: []string{
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
			"HTTP/1.1 204 No Content\r\nX-Why: nothing\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Custom: v\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n" +
				"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nX-Custom: v\r\n\r\nhello",
			"HTTP/1.1 two hundred\r\n\r\n",
		},
		steps: []step{
			{req: preq{target: "/chunked"}, want: pwant{status: 200, body: "hello world", reach: "B0", term: "--", pool: "chunked"}},
			{req: preq{target: "/nocontent"}, want: pwant{status: 204, body: "", header: map[string]string{"X-Why": "nothing"}, reach: "B1", term: "--", pool: "nocontent"}},
			{req: preq{method: "HEAD", target: "/plain"}, want: pwant{status: 200, header: map[string]string{"X-Custom": "v"}, reach: "B2", line: "HEAD /plain HTTP/1.1", term: "--", pool: "plain"}},
			{req: preq{target: "/cookies"}, want: pwant{status: 200, body: "hello", reach: "B3", term: "--", pool: "cookies",
				header: map[string]string{"Set-Cookie": "a=1; Path=/, b=2", "X-Custom": "v", "Keep-Alive": "", "Connection": ""}}},
			{req: preq{target: "/bad"}, want: pwant{status: 502, body: "~^ballast: bad response from backend", reach: "B4", term: "PH", pool: "bad"}},
		},
	},
	{
		// FuzzH2Request1 found fasthttp writing its parse of the pairs instead (h1's
		// TestCookieForwardedAsSent).
		name: "Cookie forwarded as sent",
		yaml: routeWith(""),
		steps: []step{{req: preq{header: [][2]string{{"Cookie", `a="b; =x;;c=1; "`}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Cookie": `a="b; =x;;c=1; "`},
		}}},
	},
	{
		name:     "head over max_header_bytes in fields that each fit: 431",
		listener: "max_header_bytes: 4096",
		yaml:     routeWith(""),
		steps: []step{
			{req: preq{target: "/too-large", header: bigFields(12)}, want: pwant{status: 431, term: "PR"}},
			{req: preq{target: "/small"}, want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}},
		},
	},
	{
		name:  "connection-specific field in an HTTP/2 request: reset, logged 400",
		yaml:  routeWith(""),
		only:  h2only,
		steps: []step{{req: preq{target: "/malformed", header: [][2]string{{"Connection", "close"}}}, want: pwant{status: 0, logStatus: 400, term: "PR"}}},
	},
	{
		name: "gRPC calls Ballast answers itself: trailers-only with a gRPC status",
		yaml: `
routes:
  - {path_prefix: /dead., pool: dead}
  - {path_prefix: /slow., pool: p}
pools:
  - {name: dead, backends: [{address: "{DEAD}"}]}
  - {name: p, backends: [{address: "{B0}"}]}
`,
		backends: []string{"hang"},
		only:     h2only,
		steps: []step{
			{req: grpcReq("/dead.Svc/M", ""), want: pwant{status: 200, body: "", term: "SC", pool: "dead", logStatus: 502,
				header: map[string]string{"Content-Type": "application/grpc", "Grpc-Status": "14", "Grpc-Message": "~backend connect failed"}}},
			{req: grpcReq("/none.Svc/M", ""), want: pwant{status: 200, body: "", term: "LR", logStatus: 404,
				header: map[string]string{"Content-Type": "application/grpc", "Grpc-Status": "12", "Grpc-Message": "~no route"}}},
			{req: grpcReq("/slow.Svc/M", "200m"), want: pwant{status: 200, body: "", reach: "B0", term: "sH", pool: "p", logStatus: 504, hungUp: true,
				header: map[string]string{"Content-Type": "application/grpc", "Grpc-Status": "4", "Grpc-Message": "~response timeout"}}},
		},
	},
}

// TestParityH2Settings: every transport that speaks HTTP/2 announces the documented limits
// in the server's SETTINGS (docs/operations.md; h2proxy's TestH2SettingsAnnounceLimits checked
// them on the h2c listener only): 250 concurrent streams, a stream window of 1 MiB, frames of
// at most 16 KiB, and a header list of about the listener's max_header_bytes.
func TestParityH2Settings(t *testing.T) {
	for _, tr := range transports {
		if !tr.h2 {
			continue
		}
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			env := startParity(t, "max_header_bytes: 4096", routeWith(""), []*rawBackend{newRawBackend(t)})
			c := dial(t, tr, env.srv.Addr(tr.listener).String())
			defer c.Close()
			h := newH2Conn(t, c, tr.tls)
			got := map[http2.SettingID]uint32{}
			for len(got) == 0 {
				f, err := h.fr.ReadFrame()
				if err != nil {
					t.Fatalf("reading the server's SETTINGS: %v", err)
				}
				if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
					_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
					if len(got) == 0 {
						t.Fatal("empty SETTINGS")
					}
				}
			}
			if _, ok := got[http2.SettingMaxFrameSize]; !ok {
				got[http2.SettingMaxFrameSize] = 1 << 14 // not announced: the protocol's initial value
			}
			for id, v := range map[http2.SettingID]uint32{
				http2.SettingMaxConcurrentStreams: 250,
				http2.SettingMaxFrameSize:         1 << 14,
				http2.SettingInitialWindowSize:    1 << 20,
			} {
				if got[id] != v {
					t.Errorf("%v = %d, want %d (all: %v)", id, got[id], v, got)
				}
			}
			if hl := got[http2.SettingMaxHeaderListSize]; hl < 4096 || hl > 8192 {
				t.Errorf("MAX_HEADER_LIST_SIZE = %d, want about the listener's 4096", hl)
			}
		})
	}
}

// TestParityMetrics: requests over every transport are counted in the same metrics on the
// admin listener's /metrics, responses by class per backend and retries per pool (h2proxy's
// TestMetricsCountBothPlanes, which scraped them after HTTP/2 and HTTP/1.1 requests on an h2c
// listener; h1's port of it reads the core's counters): roundrobin starts at a refusing
// backend, so the first request is retried on the live one.
func TestParityMetrics(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			env := startParity(t, "", `
admin: {address: "127.0.0.1:0"}
routes: [{pool: p}]
pools: [{name: p, balancer: roundrobin, retries: {attempts: 2}, backends: [{address: "{DEAD}", name: dead}, {address: "{B0}", name: live}]}]
`, []*rawBackend{newRawBackend(t)})
			addr := env.srv.Addr(tr.listener).String()
			for i := range 3 {
				if got := do(t, tr, addr, preq{}); got.status != 200 {
					t.Fatalf("request %d: %d, want 200", i, got.status)
				}
			}
			const want = `ballast_backend_responses_total{backend="live",class="2xx",pool="p"} 3`
			var metrics string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				resp, err := http.Get("http://" + env.srv.AdminAddr() + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				metrics = string(b)
				if strings.Contains(metrics, want) || time.Now().After(deadline) {
					break
				}
			}
			if !strings.Contains(metrics, want) {
				t.Errorf("want %s in:\n%s", want, grepLines(metrics, "responses_total"))
			}
			if !strings.Contains(metrics, `ballast_pool_retries_total{pool="p"} `) || strings.Contains(metrics, `ballast_pool_retries_total{pool="p"} 0`) {
				t.Errorf("the retry after the refused connect not counted:\n%s", grepLines(metrics, "retries_total"))
			}
		})
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
