//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

//go:build linux

package h1

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/h2mux"
	"ballast/internal/testcert"
)

// rawH2 is a client connection driven frame by frame.
type rawH2P struct {
	t     *testing.T
	noAck bool // another goroutine writes: the reader must not
	c     net.Conn
	tcp   *net.TCPConn // c's socket (c itself over h2c)
	fr    *http2.Framer
}

// dialRaw opens an h2c connection (on a "/h2/" subtest a TLS one that negotiated h2) and
// sends the preface and SETTINGS.
func dialRaw(t *testing.T, addr string) *rawH2P {
	t.Helper()
	tcp, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tcp
	if overTLS(t) {
		tc := tls.Client(tcp, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN %q, want h2", p)
		}
		c = tc
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &rawH2P{t: t, c: c, tcp: tcp.(*net.TCPConn), fr: fr}
}

// headerBlock encodes a request's header block.
func headerBlock(path string, extra ...[2]string) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "ballast.test"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	for _, kv := range extra {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return buf.Bytes()
}

// readUntil reads frames until f returns true (it wants no more) or the connection ends; it
// returns the error that ended it, or nil when f stopped it.
func (r *rawH2P) readUntil(f func(http2.Frame) bool) error {
	for {
		fr, err := r.fr.ReadFrame()
		if err != nil {
			return err
		}
		if sf, ok := fr.(*http2.SettingsFrame); ok && !sf.IsAck() && !r.noAck {
			_ = r.fr.WriteSettingsAck()
		}
		if f(fr) {
			return nil
		}
	}
}

// onBothPlanes runs an HTTP/2 test with both kinds of pool behind its listener, the two
// "planes" of h2proxy's tests (HTTP/1.1 backends, h2proxy's "engine" subtests, and h2c
// backends, its "h2proxy" ones; the engine serves both on the shards), each over h2c (prior
// knowledge on a cleartext listener) and h2 (ALPN h2 on a TLS listener): the test's
// configuration takes its pool protocol from planeProtocol and its listener from
// limitsListener, and dialRaw speaks TLS on a "/h2/" subtest.
func onBothPlanes(t *testing.T, test func(*testing.T)) {
	for _, front := range []string{"h2c", "h2"} {
		t.Run(front, func(t *testing.T) {
			t.Run("http1", test)
			t.Run("h2c", test)
		})
	}
}

// planeProtocol is the pool protocol of a test's subtest: http1 (the backends, dualServer,
// speak HTTP/1.1 too) or h2c.
func planeProtocol(t *testing.T) string {
	if strings.HasSuffix(t.Name(), "/http1") {
		return "http1"
	}
	return "h2c"
}

// overTLS reports that a test's subtest runs over h2 (TLS) rather than h2c.
func overTLS(t *testing.T) bool { return strings.Contains(t.Name(), "/h2/") }

// limitsListener is the listener "in" of a test's subtest with the YAML fields extra: h2c,
// or TLS with a certificate for localhost.
func limitsListener(t *testing.T, extra string) string {
	if !overTLS(t) {
		return `{name: in, address: "127.0.0.1:0", h2c: true` + extra + `}`
	}
	cert, key := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	return fmt.Sprintf(`{name: in, address: "127.0.0.1:0", tls: {cert: %q, key: %q}%s}`, cert, key, extra)
}

func limitsServer(t *testing.T, listenerExtra string, backend http.Handler) string {
	t.Helper()
	s := startYAML(t, fmt.Sprintf(`
listeners: [%s]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, limitsListener(t, listenerExtra), planeProtocol(t), dualServer(t, backend)))
	return s.Addr("in").String()
}

// The server's SETTINGS announce the documented limits: concurrent streams, header list size
// (the listener's max_header_bytes), frame size and the stream window.
func TestH2SettingsAnnounceLimits(t *testing.T) { onBothPlanes(t, testH2SettingsAnnounceLimits) }

func testH2SettingsAnnounceLimits(t *testing.T) {
	addr := limitsServer(t, ", max_header_bytes: 4096", http.NotFoundHandler())
	r := dialRaw(t, addr)
	got := map[http2.SettingID]uint32{}
	_ = r.readUntil(func(f http2.Frame) bool {
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			return false
		}
		_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
		return true
	})
	want := map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: h2MaxConcurrentStreams,
		http2.SettingMaxFrameSize:         h2mux.DefaultMaxFrameSize,
		http2.SettingInitialWindowSize:    h2StreamWindow,
	}
	if _, ok := got[http2.SettingMaxFrameSize]; !ok {
		got[http2.SettingMaxFrameSize] = 1 << 14 // not announced: the protocol's initial value
	}
	for id, v := range want {
		if got[id] != v {
			t.Errorf("%v = %d, want %d (all: %v)", id, got[id], v, got)
		}
	}
	if hl := got[http2.SettingMaxHeaderListSize]; hl < 4096 || hl > 8192 {
		t.Errorf("MAX_HEADER_LIST_SIZE = %d, want about the listener's 4096", hl)
	}
}

// A header list over the listener's max_header_bytes gets 431, and the connection lives on.
// (One field longer than the whole limit is a COMPRESSION_ERROR that ends the connection:
// x/net/http2 caps the decoder's string length at the limit.)
func TestH2HeaderListTooLarge(t *testing.T) { onBothPlanes(t, testH2HeaderListTooLarge) }

func testH2HeaderListTooLarge(t *testing.T) {
	addr := limitsServer(t, ", max_header_bytes: 4096", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := dialRaw(t, addr)
	var many [][2]string // each field fits, the list does not (x/net adds 4096 of slack)
	for i := range 12 {
		many = append(many, [2]string{fmt.Sprintf("x-big-%d", i), strings.Repeat("a", 1000)})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("/", many...), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: headerBlock("/small"), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := map[uint32]string{}
	err := r.readUntil(func(f http2.Frame) bool {
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			status[mh.StreamID] = mh.PseudoValue("status")
		}
		return len(status) == 2
	})
	if err != nil {
		t.Fatalf("connection ended: %v (statuses %v)", err, status)
	}
	if status[1] != "431" || status[3] != "200" {
		t.Errorf("statuses %v, want stream 1: 431, stream 3: 200", status)
	}
}

// CONTINUATION flood (CVE-2024-27316 class): a header block that never ends, sent as endless
// CONTINUATION frames, ends the connection once it passes the header list limit, long before
// the 16 MiB the client is willing to send.
func TestH2ContinuationFlood(t *testing.T) { onBothPlanes(t, testH2ContinuationFlood) }

func testH2ContinuationFlood(t *testing.T) {
	addr := limitsServer(t, ", max_header_bytes: 8192", http.NotFoundHandler())
	r := dialRaw(t, addr)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("/"), EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	var junk bytes.Buffer
	enc := hpack.NewEncoder(&junk)
	_ = enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("z", 1000)})
	r.noAck = true
	ended := make(chan error, 1)
	go func() {
		ended <- r.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	}()
	sent := 0
	var werr error
	for sent < 16<<20 {
		if werr = r.fr.WriteContinuation(1, false, junk.Bytes()); werr != nil {
			break
		}
		sent += junk.Len()
	}
	select {
	case err := <-ended:
		if err != nil && !errors.Is(err, io.EOF) && !isReset(err) {
			t.Logf("connection ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was neither closed nor sent GOAWAY during the flood")
	}
	if werr == nil {
		t.Errorf("the server took all %d bytes of CONTINUATION frames", sent)
	}
}

// Rapid reset (CVE-2023-44487): a client that opens streams and cancels them at once, faster
// than the limit, is disconnected; the backend sees far fewer requests than were opened.
func TestH2RapidResetDisconnects(t *testing.T) { onBothPlanes(t, testH2RapidResetDisconnects) }

func testH2RapidResetDisconnects(t *testing.T) {
	var seen atomic.Int64
	addr := limitsServer(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		<-r.Context().Done()
	}))
	r := dialRaw(t, addr)
	r.noAck = true
	r.noAck = true
	ended := make(chan error, 1)
	go func() { ended <- r.readUntil(func(http2.Frame) bool { return false }) }()
	const streams = 20000
	opened := 0
	block := headerBlock("/")
	for id := uint32(1); opened < streams; id += 2 {
		if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			break
		}
		if err := r.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		opened++
	}
	select {
	case <-ended:
	case <-time.After(15 * time.Second):
		t.Fatalf("still connected after opening and resetting %d streams", opened)
	}
	// The writes may all fit in socket buffers before the close is noticed, so what counts is
	// that the connection ended and that few of the streams ever reached the backend.
	if n := seen.Load(); n > streams/10 {
		t.Errorf("the backend saw %d of %d reset streams", n, opened)
	}
	t.Logf("disconnected after %d streams; the backend saw %d", opened, seen.Load())
}

// An HTTP/2 connection with no streams for the listener's idle_timeout gets GOAWAY and closes.
func TestH2IdleTimeout(t *testing.T) { onBothPlanes(t, testH2IdleTimeout) }

func testH2IdleTimeout(t *testing.T) {
	addr := limitsServer(t, ", idle_timeout: 300ms", http.NotFoundHandler())
	r := dialRaw(t, addr)
	begin := time.Now()
	goaway := false
	err := r.readUntil(func(f http2.Frame) bool {
		_, ok := f.(*http2.GoAwayFrame)
		goaway = goaway || ok
		return false
	})
	if !goaway || err == nil {
		t.Errorf("idle connection: goaway %v, end %v", goaway, err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("closed after %v", d)
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe")
}

// The rapid-reset limit itself, without x/net's queue limit: waves of 100 streams (well under
// the concurrent-stream limit, so none wait) that reach the backend and are then reset. The
// connection is closed once more than MaxClientResetsPerSecond resets fall in one second.
func TestH2RapidResetLimitPaced(t *testing.T) { onBothPlanes(t, testH2RapidResetLimitPaced) }

func testH2RapidResetLimitPaced(t *testing.T) {
	var seen atomic.Int64
	addr := limitsServer(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		<-r.Context().Done()
	}))
	r := dialRaw(t, addr)
	r.noAck = true
	ended := make(chan struct{}) // closed when the connection ends, so every wait sees it
	go func() { _ = r.readUntil(func(http2.Frame) bool { return false }); close(ended) }()
	block := headerBlock("/")
	id := uint32(1)
	resets := 0
	for wave := 0; wave < 40; wave++ {
		first := id
		for range 100 {
			if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
				t.Logf("write headers: %v", err)
				goto done
			}
			id += 2
		}
		want := int64(wave+1) * 100
		deadline := time.Now().Add(10 * time.Second)
		for seen.Load() < want && time.Now().Before(deadline) {
			select {
			case <-ended:
				goto done
			case <-time.After(5 * time.Millisecond):
			}
		}
		for sid := first; sid < id; sid += 2 {
			if err := r.fr.WriteRSTStream(sid, http2.ErrCodeCancel); err != nil {
				t.Logf("write: %v", err)
				goto done
			}
			resets++
		}
	}
done:
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("still connected after %d resets", resets)
	}
	if resets < h2ResetBurst {
		t.Errorf("disconnected after only %d resets, under the limit of %d per second", resets, h2ResetBurst)
	}
	t.Logf("disconnected after %d resets in waves of 100", resets)
}

// Shutdown sends GOAWAY on open HTTP/2 connections, lets a running stream finish, and returns.
func TestShutdownDrainsHTTP2(t *testing.T) { onBothPlanes(t, testShutdownDrainsHTTP2) }

func testShutdownDrainsHTTP2(t *testing.T) {
	release, running := make(chan struct{}), make(chan struct{})
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-release
		io.WriteString(w, "done")
	}))
	s := startYAML(t, fmt.Sprintf(`
listeners: [%s]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, limitsListener(t, ""), planeProtocol(t), backend))
	r := dialRaw(t, s.Addr("in").String())
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("/"), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	select { // the stream is running at the backend before shutdown begins
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never reached the backend")
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	var goaway, answered bool
	_ = r.readUntil(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			goaway = true
			close(release) // the running stream may finish now
		case *http2.DataFrame:
			answered = answered || string(f.Data()) == "done"
		}
		return false
	})
	if !goaway || !answered {
		t.Errorf("goaway %v, running stream answered %v", goaway, answered)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// The requests h2mux refuses before any of the engine's code runs get their access-log line
// too: 431 for a head past max_header_bytes, 400 for a malformed one (a connection-specific
// field, reset with PROTOCOL_ERROR), both marked refused (PR).
func TestRefusedRequestsLogged(t *testing.T) { onBothPlanes(t, testRefusedRequestsLogged) }

func testRefusedRequestsLogged(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "access.log")
	s := startYAML(t, fmt.Sprintf(`
listeners: [%s]
logging: {access: true, access_file: %q}
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, limitsListener(t, ", max_header_bytes: 4096"), logFile, planeProtocol(t), dualServer(t, http.NotFoundHandler())))
	r := dialRaw(t, s.Addr("in").String())
	var big [][2]string
	for i := range 6 {
		big = append(big, [2]string{fmt.Sprintf("x-big-%d", i), strings.Repeat("a", 1000)})
	}
	_ = r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headerBlock("/too-large", big...), EndStream: true, EndHeaders: true})
	_ = r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: headerBlock("/malformed", [2]string{"connection", "close"}), EndStream: true, EndHeaders: true})
	var lines []string
	deadline := time.Now().Add(10 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(logFile)
		if s := strings.TrimSpace(string(data)); s != "" {
			lines = strings.Split(s, "\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := map[string]string{"/too-large": `"status":431`, "/malformed": `"status":400`}
	for _, l := range lines {
		for uri, status := range want {
			if strings.Contains(l, `"uri":"`+uri+`"`) && strings.Contains(l, status) && strings.Contains(l, `"termination":"PR"`) && strings.Contains(l, `"proto":"HTTP/2.0"`) {
				delete(want, uri)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("no access-log line for %v; lines:\n%s", want, strings.Join(lines, "\n"))
	}
}

// A client that floods PINGs and reads nothing (CVE-2019-9512): the acknowledgements queued
// unwritten pass the control-frame limit, the connection ends, and the server stops taking
// the flood (the client's writes fail) within a bounded number of bytes.
func TestH2PingFloodWithoutReading(t *testing.T) { onBothPlanes(t, testH2PingFloodWithoutReading) }

func testH2PingFloodWithoutReading(t *testing.T) {
	addr := limitsServer(t, "", http.NotFoundHandler())
	r := dialRaw(t, addr)
	_ = r.tcp.SetReadBuffer(4 << 10) // the client's socket fills quickly
	begin := time.Now()
	var data [8]byte
	sent := 0
	var err error
	for sent < 2_000_000 && time.Since(begin) < 15*time.Second {
		if err = r.fr.WritePing(false, data); err != nil {
			break
		}
		sent++
	}
	if err == nil {
		t.Fatalf("the server took %d PINGs in %v from a client that reads nothing", sent, time.Since(begin))
	}
	t.Logf("the connection ended after %d PINGs, %v: %v", sent, time.Since(begin).Round(time.Millisecond), err)
}
