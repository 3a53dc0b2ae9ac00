package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// zeros is an endless reader of zero bytes, for bodies that nobody should have to hold.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// peakRSS reads the high-water mark of a process's resident memory (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestServeGigabyteBodies: a 1 GiB upload and a 1 GiB download pass through a real ballast
// process while its resident memory stays far below the body size (bodies stream both ways).
func TestServeGigabyteBodies(t *testing.T) {
	const size = 1 << 30
	const rssLimit = 128 << 20
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/up":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprint(w, n)
		case "/down":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			_, _ = io.CopyN(w, zeros{}, size)
		}
	}))
	t.Cleanup(be.Close)
	p := e2eStart(t, "serve", "--listen", "127.0.0.1:0", "--backend", strings.TrimPrefix(be.URL, "http://"))
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1]

	req, err := http.NewRequest("POST", url+"/up", io.LimitReader(zeros{}, size))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != strconv.Itoa(size) {
		t.Fatalf("upload: %d %q, want 200 and the backend counting %d bytes", resp.StatusCode, body, size)
	}

	resp, err = http.Get(url + "/down")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, err %v, want %d", n, err, size)
	}

	rss := peakRSS(t, p.cmd.Process.Pid)
	t.Logf("ballast's peak RSS after 1 GiB up and 1 GiB down: %d MiB", rss>>20)
	if rss > rssLimit {
		t.Errorf("peak RSS %d MiB, want under %d MiB: a body was buffered", rss>>20, rssLimit>>20)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}
