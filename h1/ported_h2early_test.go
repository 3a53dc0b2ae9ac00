//go:build linux

package h1

import (
	"io"
	"net/http"
	"testing"
)

// TestEarlyResponseToUploadH2C: the fasthttp plane's TestEarlyResponseToUpload for a stream of
// an h2c connection on the shards: a backend that refuses a large upload after its headers
// (413, Connection: close, the body unread) has its answer passed to the client, whether the
// client still sends the body or not, and the connection's other streams go on.
func TestEarlyResponseToUploadH2C(t *testing.T) {
	addr, refused := refusingBackend(t)
	te, _ := h2cEngine(t, testConfig(testPool("u", "roundrobin", addr)), nil)
	c := h2cClient()
	for i, size := range []int64{10 << 20, 1 << 20} {
		req, _ := http.NewRequest("POST", te.url("/upload"), &pattern{n: size})
		req.ContentLength = size
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 413 || string(body) != "too large" {
			t.Fatalf("upload %d: %s %d %q, want HTTP/2 413 %q", i, resp.Proto, resp.StatusCode, body, "too large")
		}
		if n := refused.Load(); n != int64(i+1) {
			t.Fatalf("the backend refused %d uploads, want %d", n, i+1)
		}
	}
	resp, body := get(t, c, "GET", te.url("/next"), nil, nil)
	if resp.StatusCode != 200 || string(body) != "next" {
		t.Fatalf("a request after the refused uploads: %d %q", resp.StatusCode, body)
	}
	waitFor(t, "in-flight back to 0", func() bool { return inflight(te.pools["u"]) == 0 })
}
