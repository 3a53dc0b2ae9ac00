//go:build linux

package h1

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// The body is h1's pattern (behaviour_test.go: deterministic bytes that reveal reordered, lost
// or repeated chunks); patternHex is its SHA-256 as hex.
func patternHex(n int64) string {
	sum := patternSum(n)
	return fmt.Sprintf("%x", sum[:])
}

// 64 MiB move up (the backend answers the body's digest) and down (the backend sends a
// pattern the client checks) through the HTTP/2 front end, on a stream each, to an h2c and an
// HTTP/1.1 backend: flow control and backpressure both ways, nothing lost or reordered.
func TestLargeTransfers(t *testing.T) {
	const size = 64 << 20
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = io.Copy(w, &pattern{n: size})
	}))
	want := patternHex(size)
	for _, protocol := range []string{"h2c", "http1"} {
		t.Run(protocol, func(t *testing.T) {
			s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, protocol, backend))
			url := "http://" + s.Addr("in").String() + "/big"
			c := xh2c()
			c.Timeout = 0
			errs := make(chan error, 2)
			go func() { // up
				resp, err := c.Post(url, "application/octet-stream", &pattern{n: size})
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got := fmt.Sprintf("%d %s", size, want); resp.StatusCode != 200 || string(b) != got {
					errs <- fmt.Errorf("upload: %d %q, want %q", resp.StatusCode, b, got)
					return
				}
				errs <- nil
			}()
			go func() { // down
				resp, err := c.Get(url)
				if err != nil {
					errs <- err
					return
				}
				h := sha256.New()
				n, err := io.Copy(h, resp.Body)
				resp.Body.Close()
				if err != nil || n != size || fmt.Sprintf("%x", h.Sum(nil)) != want {
					errs <- fmt.Errorf("download: %d bytes, err %v, digest match %v", n, err, fmt.Sprintf("%x", h.Sum(nil)) == want)
					return
				}
				errs <- nil
			}()
			for range 2 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A client that does not read holds the backend back: the response stops at the windows and
// buffers on the way (the client's, the engine's output room, the backend transport's), far
// short of the body, and completes once the client reads.
func TestDownloadBackpressure(t *testing.T) {
	const size = 64 << 20
	var written atomic.Int64
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		buf := make([]byte, 32<<10)
		for p := (&pattern{n: size}); ; {
			n, err := p.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				written.Add(int64(n))
			}
			if err != nil {
				return
			}
		}
	}))
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: h2c, backends: [{address: %s}]}]
`, backend))
	c := xh2c()
	c.Timeout = 0
	resp, err := c.Get("http://" + s.Addr("in").String() + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Give the backend time to run ahead if nothing held it back; it stops at the windows.
	var last int64 = -1
	for i := 0; i < 50 && written.Load() != last; i++ {
		last = written.Load()
		time.Sleep(50 * time.Millisecond)
	}
	if n := written.Load(); n > 24<<20 {
		t.Errorf("the backend wrote %d MiB to a client that read nothing", n>>20)
	}
	t.Logf("the backend stopped at %d KiB while the client read nothing", written.Load()>>10)
	h := sha256.New()
	if n, err := io.Copy(h, resp.Body); err != nil || n != size || fmt.Sprintf("%x", h.Sum(nil)) != patternHex(size) {
		t.Errorf("after reading: %d bytes, %v", n, err)
	}
}
