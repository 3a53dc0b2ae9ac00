//go:build linux

package h1

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/evloop"
	"ballast/internal/testcert"
)

// TestGRPCDeadlineBeatsBrokenBackend: a backend that gives up on a gRPC request just after
// its grpc-timeout (an HTTP/1.1 backend closing its connection, an h2c one resetting its
// stream) breaks the attempt before the shard's deadline timer, which fires at the first tick
// boundary at or after the deadline, has run. The client's deadline has passed either way,
// so it gets DEADLINE_EXCEEDED (4), not UNAVAILABLE (14), over h2c and over h2 (TLS). The 12
// deadlines are spread over a tick so that most breaks land before the timer: before the
// answer looked at the deadline, grpc-go's interop case timeout_on_sleeping_server saw 14.
func TestGRPCDeadlineBeatsBrokenBackend(t *testing.T) {
	const base = 30 * time.Millisecond
	tick := time.Duration(1) << evloop.TickShift
	past := 300 * time.Microsecond // how long after the deadline (from its own receipt) a backend gives up

	// h1 reads a request head and closes the connection past-after the request's grpc-timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					d, ok := grpcTimeout(req.Header.Get("Grpc-Timeout"))
					if !ok {
						fmt.Fprint(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
						continue
					}
					time.Sleep(d + past)
					return // closed before responding
				}
			}()
		}
	}()
	// h2 resets the request's stream past-after its grpc-timeout.
	h2 := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := grpcTimeout(r.Header.Get("Grpc-Timeout"))
		time.Sleep(d + past)
		panic(http.ErrAbortHandler)
	}))

	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "front", 1, "app.test")
	s := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: in, address: "127.0.0.1:0", h2c: true}
  - {name: tls, address: "127.0.0.1:0", tls: {cert: %q, key: %q}}
pools:
  - {name: h1, backends: [{address: %s}]}
  - {name: h2c, protocol: h2c, backends: [{address: %s}]}
routes:
  - {path_prefix: /h1., pool: h1}
  - {path_prefix: /h2c., pool: h2c}
`, filepath.ToSlash(cert), filepath.ToSlash(key), ln.Addr(), h2))
	var h2only http.Protocols
	h2only.SetHTTP2(true)
	h2tls := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Protocols:       &h2only,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "app.test"},
	}}
	planes := []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"h2c", xh2c(), "http://" + s.Addr("in").String()},
		{"h2", h2tls, "https://" + s.Addr("tls").String()},
	}
	for _, pl := range planes {
		for _, pool := range []string{"h1", "h2c"} {
			for i := range 12 {
				d := base + time.Duration(i)*tick/12
				where := fmt.Sprintf("%s client, %s backend, grpc-timeout %v", pl.name, pool, d)
				req, _ := http.NewRequest("POST", pl.url+"/"+pool+".Svc/M", strings.NewReader("\x00\x00\x00\x00\x00"))
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("Te", "trailers")
				req.Header.Set("Grpc-Timeout", fmt.Sprintf("%du", d.Microseconds()))
				resp, err := pl.c.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status := resp.Header.Get("Grpc-Status")
				if status == "" {
					status = resp.Trailer.Get("Grpc-Status")
				}
				if resp.ProtoMajor != 2 {
					t.Errorf("%s: answered over HTTP/%d, want 2", where, resp.ProtoMajor)
				}
				if resp.StatusCode != 200 || status != "4" {
					t.Errorf("%s: HTTP %d grpc-status %q (%q), want 200 with 4 (DEADLINE_EXCEEDED)", where,
						resp.StatusCode, status, resp.Header.Get("Grpc-Message")+resp.Trailer.Get("Grpc-Message"))
				}
			}
		}
	}
}

// grpcTimeout reads the microsecond grpc-timeout the test sends.
func grpcTimeout(v string) (time.Duration, bool) {
	var us int64
	if _, err := fmt.Sscanf(v, "%du", &us); err != nil || us <= 0 {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}
