//go:build linux

package h1

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkH2CProxy measures one request through the engine's HTTP/2 path (ported from
// h2proxy, whose plane it measured until the shards served h2c): an h2c client (x/net's
// Transport) multiplexing parallel streams over one connection, a pool of one backend
// answering 44 bytes over HTTP/1.1 or h2c. The numbers include the client and the backend
// (Go's net/http server) in this process.
func BenchmarkH2CProxy(b *testing.B) {
	for _, protocol := range []string{"http1", "h2c"} {
		b.Run(protocol, func(b *testing.B) {
			body := []byte("<html><body><h1>It works!</h1></body></html>")
			backend := dualServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "44")
				w.Write(body)
			}))
			s := startYAML(b, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, protocol, backend))
			url := "http://" + s.Addr("in").String() + "/"
			c := xh2c()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
