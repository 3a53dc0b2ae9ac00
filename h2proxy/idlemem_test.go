package h2proxy_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestIdleMemoryReport measures what N idle HTTP/2 client connections, each after one
// request, cost when BALLAST_IDLE_CONNS=N is set: in this process (Go heap and goroutine
// stacks after garbage collection, client side included) or, with BALLAST_IDLE_ADDR=host:port
// and BALLAST_IDLE_PID=pid, a running `ballast serve`'s h2c listener and its RSS growth
// (BALLAST_IDLE_TLS=1: a TLS listener, ALPN h2).
// docs/performance.md quotes it.
//
//	BALLAST_IDLE_CONNS=2000 go test -run TestIdleMemoryReport -v ./h2proxy
func TestIdleMemoryReport(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BALLAST_IDLE_CONNS"))
	if n <= 0 {
		t.Skip("BALLAST_IDLE_CONNS not set")
	}
	addr, pid := os.Getenv("BALLAST_IDLE_ADDR"), os.Getenv("BALLAST_IDLE_PID")
	if addr == "" {
		backend := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
		s := start(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: http1, backends: [{address: %s}]}]
`, backend))
		addr = s.Addr("in").String()
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var hello bytes.Buffer
	hello.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&hello, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteSettingsAck()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	useTLS := os.Getenv("BALLAST_IDLE_TLS") != ""
	if useTLS && pid == "" {
		t.Skip("BALLAST_IDLE_TLS needs BALLAST_IDLE_ADDR and BALLAST_IDLE_PID")
	}
	open := func() net.Conn {
		var c net.Conn
		var err error
		if useTLS {
			c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		} else {
			c, err = net.Dial("tcp", addr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hello.Bytes()); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		rd := http2.NewFramer(nil, c)
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
				break
			}
		}
		_ = c.SetReadDeadline(time.Time{})
		return c
	}
	rss := func() int {
		data, _ := os.ReadFile("/proc/" + pid + "/status")
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				return kb
			}
		}
		return 0
	}
	warm := open()
	defer warm.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss0 := rss()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		conns = append(conns, open())
	}
	time.Sleep(time.Second) // the streams' goroutines finish, the buffers go back
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if pid != "" {
		rss1 := rss()
		t.Logf("RSS of pid %s: %d -> %d kB, %.2f kB per idle HTTP/2 connection (%d connections)", pid, rss0, rss1, float64(rss1-rss0)/float64(n), n)
		return
	}
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	t.Logf("per idle HTTP/2 connection (client side included): heap %.0f B, stacks %.0f B; goroutines %d",
		per(before.HeapAlloc, after.HeapAlloc), per(before.StackInuse, after.StackInuse), runtime.NumGoroutine())
}
