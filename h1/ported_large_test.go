//go:build linux

package h1

import (
	"crypto/sha256"
	"io"
	"net/http"
	"runtime"
	"testing"
)

// TestLargeBodies moves 64 MiB up and down through the engine (the fasthttp plane's test,
// over h1's bigBackend) and checks that the whole process (client, engine and backend
// together) allocated far less than one body: nothing buffers it. Test64MiBBothWays checks
// the bytes over plain TCP and TLS; this bounds what moving them costs.
func TestLargeBodies(t *testing.T) {
	be := bigBackend(t)
	tp := startProxy(t, testConfig(testPool("big", "roundrobin", be)))
	c := testClient()
	want := patternSum(big)
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"upload content-length", func(t *testing.T) {
			req, _ := http.NewRequest("POST", tp.url("/up"), &pattern{n: big})
			req.ContentLength = big
			checkUpload(t, c, req, big, want)
		}},
		{"upload chunked", func(t *testing.T) {
			req, _ := http.NewRequest("POST", tp.url("/up"), io.NopCloser(&pattern{n: big}))
			req.ContentLength = -1
			checkUpload(t, c, req, big, want)
		}},
		{"download content-length", func(t *testing.T) { checkDownload(t, c, tp.url("/down"), want) }},
		{"download chunked", func(t *testing.T) { checkDownload(t, c, tp.url("/down?chunked=1"), want) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tc.run(t)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > big/2 {
				t.Errorf("allocated %d MiB moving a %d MiB body: something buffers it", alloc>>20, big>>20)
			}
		})
	}
	waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["big"]) == 0 })
}

func checkDownload(t *testing.T, c *http.Client, url string, want [32]byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		t.Fatal(err)
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	if got != want {
		t.Fatalf("downloaded body differs")
	}
}
