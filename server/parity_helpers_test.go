package server_test

import (
	"ballast/internal/refused"
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
	"ballast/internal/testcert"
	"ballast/server"
)

// The parity suite's machinery: transports that speak to Ballast byte for byte (a raw HTTP/1.1
// writer, a raw HTTP/2 client on x/net's Framer), a raw recording backend, and the access log.

// transport is one way a client reaches Ballast.
type transport struct {
	name     string
	tls, h2  bool
	proxy    bool   // a PROXY header (v1, naming 127.0.0.1) before anything else
	listener string // the listener it connects to
	baseline string // the HTTP/1.1 transport whose backend bytes it must equal ("" for itself)
}

var transports = []transport{
	{name: "http1", listener: "plain"},
	{name: "http1-tls", tls: true, listener: "tls"},
	{name: "h2", tls: true, h2: true, listener: "tls", baseline: "http1-tls"},
	{name: "h2c", h2: true, listener: "plain", baseline: "http1"},
	{name: "http1-tls-proxy", tls: true, proxy: true, listener: "tls-proxy", baseline: "http1-tls"},
	{name: "h2-proxy", tls: true, h2: true, proxy: true, listener: "tls-proxy", baseline: "http1-tls"},
}

// sendProxyHeader writes the PROXY header of a proxy transport's connection c: the client it
// names is c's own address, so that every case's forwarding fields hold as they are.
func sendProxyHeader(t *testing.T, tr transport, c net.Conn) {
	t.Helper()
	if !tr.proxy {
		return
	}
	src, dst := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	if _, err := fmt.Fprintf(c, "PROXY TCP4 %s %s %d %d\r\n", src.IP, dst.IP, src.Port, dst.Port); err != nil {
		t.Fatalf("%s: PROXY header: %v", tr.name, err)
	}
}

// preq is a request as a client sends it. Header names are written as given over HTTP/1.1
// and in lower case over HTTP/2.
type preq struct {
	method  string // default GET
	target  string // default "/"; sent as is (no normalisation)
	host    string // default app.test; "-" sends none (HTTP/1.0 only)
	proto   string // HTTP/1 only: the version, default HTTP/1.1
	header  [][2]string
	body    string
	raw     string        // HTTP/1 only: the whole request, written as is
	leave   time.Duration // leave (close the connection, reset the stream) this long after sending
	partial bool          // send headers without ending the stream (HTTP/2) and wait for the answer
	chunked bool          // HTTP/1: send the body chunked; HTTP/2: without content-length
	cookie  bool          // send the cookie an earlier step's Set-Cookie set (pwant.capture)
	trailer [][2]string   // trailers after the body: chunked (HTTP/1), trailing HEADERS (HTTP/2)
}

func (r preq) withDefaults() preq {
	if r.method == "" {
		r.method = "GET"
	}
	if r.target == "" {
		r.target = "/"
	}
	if r.host == "" {
		r.host = "app.test"
	}
	if r.proto == "" {
		r.proto = "HTTP/1.1"
	}
	return r
}

// presp is what the client got.
type presp struct {
	status  int
	header  http.Header
	body    []byte
	trailer http.Header
	reset   bool // the stream was reset or the connection closed without a response
}

// dial connects to addr over tr.
func dial(t *testing.T, tr transport, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sendProxyHeader(t, tr, c)
	if tr.tls {
		protos := []string{"http/1.1"}
		if tr.h2 {
			protos = []string{"h2"}
		}
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: protos, ServerName: "app.test"})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: TLS handshake: %v", tr.name, err)
		}
		if got := tc.ConnectionState().NegotiatedProtocol; tr.h2 && got != "h2" {
			t.Fatalf("%s: ALPN %q", tr.name, got)
		}
		c = tc
	}
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	return c
}

// do sends r over tr and reads the answer.
func do(t *testing.T, tr transport, addr string, r preq) presp {
	t.Helper()
	r = r.withDefaults()
	c := dial(t, tr, addr)
	defer c.Close()
	if tr.h2 {
		return h2Do(t, c, tr.tls, r)
	}
	return h1Do(t, c, r)
}

// h1Request renders r as HTTP/1.1 bytes.
func h1Request(r preq) string {
	if r.raw != "" {
		return r.raw
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", r.method, r.target, r.proto)
	if r.host != "-" {
		fmt.Fprintf(&b, "Host: %s\r\n", r.host)
	}
	hasLength := false
	for _, h := range r.header {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
		if strings.EqualFold(h[0], "Content-Length") || strings.EqualFold(h[0], "Transfer-Encoding") {
			hasLength = true
		}
	}
	switch {
	case r.chunked:
		b.WriteString("Transfer-Encoding: chunked\r\n")
	case r.body != "" && !hasLength:
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(r.body))
	}
	b.WriteString("\r\n")
	switch {
	case r.partial:
	case r.chunked:
		fmt.Fprintf(&b, "%x\r\n%s\r\n0\r\n", len(r.body), r.body)
		for _, f := range r.trailer {
			fmt.Fprintf(&b, "%s: %s\r\n", f[0], f[1])
		}
		b.WriteString("\r\n")
	default:
		b.WriteString(r.body)
	}
	return b.String()
}

func h1Do(t *testing.T, c net.Conn, r preq) presp {
	t.Helper()
	// A write cut short by Ballast's answer (a head it refuses while it is still being sent)
	// still leaves that answer to read.
	_, _ = io.WriteString(c, h1Request(r))
	if r.leave > 0 {
		time.Sleep(r.leave)
		return presp{reset: true}
	}
	br := bufio.NewReader(c)
	var req *http.Request
	if r.method == "HEAD" {
		req, _ = http.NewRequest("HEAD", "/", nil)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return presp{reset: true}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return presp{status: resp.StatusCode, header: resp.Header, body: body, trailer: resp.Trailer}
}

// h2Do sends r as the only stream of a fresh HTTP/2 connection on c.
func h2Do(t *testing.T, c net.Conn, isTLS bool, r preq) presp {
	t.Helper()
	return newH2Conn(t, c, isTLS).do(t, 1, r)
}

// h2conn is a raw HTTP/2 client connection on x/net's Framer and hpack: pseudo-headers and
// fields go out exactly as given.
type h2conn struct {
	fr  *http2.Framer
	tls bool
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newH2Conn(t *testing.T, c net.Conn, isTLS bool) *h2conn {
	t.Helper()
	h, err := openH2(c, isTLS)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// openH2 sends the client preface, SETTINGS and a connection window on c.
func openH2(c net.Conn, isTLS bool) (*h2conn, error) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil, err
	}
	h := &h2conn{fr: http2.NewFramer(c, c), tls: isTLS}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.hb)
	if err := h.fr.WriteSettings(); err != nil {
		return nil, err
	}
	if err := h.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		return nil, err
	}
	return h, nil
}

// do sends r on stream id and reads its answer.
func (h *h2conn) do(t *testing.T, id uint32, r preq) presp {
	t.Helper()
	fr := h.fr
	h.hb.Reset()
	field := func(k, v string) { _ = h.enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	field(":method", r.method)
	if r.method != "CONNECT" {
		scheme := "http"
		if h.tls {
			scheme = "https"
		}
		field(":scheme", scheme)
		field(":path", r.target)
	}
	if r.host != "-" {
		field(":authority", r.host)
	}
	for _, f := range r.header {
		field(strings.ToLower(f[0]), f[1])
	}
	if r.body != "" && !r.chunked && !hasField(r.header, "content-length") {
		field("content-length", strconv.Itoa(len(r.body)))
	}
	endStream := r.body == "" && !r.partial
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true, EndStream: endStream}); err != nil {
		return presp{reset: true} // the connection was closed under the write
	}
	if r.body != "" && !r.partial {
		if err := fr.WriteData(id, len(r.trailer) == 0, []byte(r.body)); err != nil {
			t.Fatal(err)
		}
		if len(r.trailer) > 0 {
			h.hb.Reset()
			for _, f := range r.trailer {
				field(strings.ToLower(f[0]), f[1])
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.leave > 0 {
		time.Sleep(r.leave)
		_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
		time.Sleep(50 * time.Millisecond)
		return presp{reset: true}
	}
	out := presp{header: http.Header{}}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			out.reset = out.status == 0
			return out
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			st := 0
			hdr := http.Header{}
			for _, hf := range f.Fields {
				if hf.Name == ":status" {
					st, _ = strconv.Atoi(hf.Value)
					continue
				}
				hdr.Add(hf.Name, hf.Value)
			}
			if st >= 100 && st < 200 {
				continue // interim
			}
			if out.status == 0 {
				out.status, out.header = st, hdr
			} else if st == 0 {
				out.trailer = hdr
			}
			if f.StreamEnded() {
				return out
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			out.body = append(out.body, f.Data()...)
			if len(f.Data()) > 0 {
				_ = fr.WriteWindowUpdate(id, uint32(len(f.Data())))
			}
			if f.StreamEnded() {
				return out
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				out.reset = true
				return out
			}
		case *http2.GoAwayFrame:
			out.reset = out.status == 0
			return out
		}
	}
}

func hasField(h [][2]string, name string) bool {
	for _, f := range h {
		if strings.EqualFold(f[0], name) {
			return true
		}
	}
	return false
}

// recorded is one request as a backend received it, and when its connection ended.
type recorded struct {
	head string // the request line and fields, as sent
	body []byte
	h2   *h2Record // an HTTP/2 backend's: the stream as sent (head is made from it)
}

// rawBackend is a backend on a loopback port that records every request byte for byte and
// answers each with its script's next answer (the last one repeats). An answer "hang" never
// answers; the connection's end is then recorded (closedAt).
type rawBackend struct {
	ln      net.Listener
	answers []string
	mu      sync.Mutex
	reqs    []recorded
	closed  chan struct{} // a "hang" connection was closed by the proxy
	h2      bool          // it speaks HTTP/2 (serveH2)
}

func newRawBackend(t *testing.T, answers ...string) *rawBackend {
	t.Helper()
	return newRawBackendTLS(t, nil, answers...)
}

// newRawBackendTLS is newRawBackend serving TLS with tc when tc is not nil (a pool with tls).
func newRawBackendTLS(t *testing.T, tc *tls.Config, answers ...string) *rawBackend {
	t.Helper()
	return newRawBackendProto(t, tc, false, answers...)
}

// newRawBackendProto is newRawBackendTLS speaking HTTP/2 when h2 is set
// (parity_h2backend_helpers_test.go).
func newRawBackendProto(t *testing.T, tc *tls.Config, h2 bool, answers ...string) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	if len(answers) == 0 {
		answers = []string{okAnswer}
	}
	rb := &rawBackend{ln: ln, answers: answers, closed: make(chan struct{}, 16), h2: h2}
	// wg counts the accept loop too, so that its Adds never race the cleanup's Wait; a
	// connection accepted after the cleanup closed the others is closed at once.
	var wg sync.WaitGroup
	var conns []net.Conn
	done := false
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rb.mu.Lock()
			if done {
				rb.mu.Unlock()
				c.Close()
				continue
			}
			conns = append(conns, c)
			wg.Add(1)
			rb.mu.Unlock()
			go func() {
				defer wg.Done()
				if rb.h2 {
					rb.serveH2(c)
				} else {
					rb.serve(c)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		rb.mu.Lock()
		done = true
		for _, c := range conns {
			c.Close()
		}
		rb.mu.Unlock()
		wg.Wait()
	})
	return rb
}

// parityBackendTLS is the TLS configuration of a case's backends (a certificate for
// backend.test and 127.0.0.1, its own CA) and yaml with {CA} naming that CA's file.
func parityBackendTLS(t *testing.T, yaml string) (*tls.Config, string) {
	t.Helper()
	certFile, keyFile := testcert.Write(t, t.TempDir(), "backend", 1, "backend.test")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{kp}}, strings.ReplaceAll(yaml, "{CA}", certFile)
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"

func (rb *rawBackend) addr() string { return rb.ln.Addr().String() }

func (rb *rawBackend) count() int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return len(rb.reqs)
}

func (rb *rawBackend) last() recorded {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.reqs[len(rb.reqs)-1]
}

func (rb *rawBackend) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		var head strings.Builder
		length, chunked := 0, false
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" || line == "\n" {
				break
			}
			k, v, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "content-length":
				length, _ = strconv.Atoi(strings.TrimSpace(v))
			case "transfer-encoding":
				chunked = strings.Contains(strings.ToLower(v), "chunked")
			}
		}
		var body []byte
		if chunked {
			tp := httpChunked(br)
			b, err := io.ReadAll(tp)
			if err != nil {
				return
			}
			body = b
		} else if length > 0 {
			body = make([]byte, length)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
		}
		rb.mu.Lock()
		rb.reqs = append(rb.reqs, recorded{head: head.String(), body: body})
		answer := rb.answers[min(len(rb.reqs), len(rb.answers))-1]
		rb.mu.Unlock()
		switch {
		case answer == "hang":
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			_, _ = br.ReadByte() // returns when the proxy closes the connection
			rb.closed <- struct{}{}
			return
		case strings.HasPrefix(answer, "sleep "):
			d, _ := time.ParseDuration(strings.Fields(answer)[1])
			time.Sleep(d)
			answer = okAnswer
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
	}
}

// httpChunked decodes a chunked body (trailers are skipped).
func httpChunked(br *bufio.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				pw.CloseWithError(io.ErrUnexpectedEOF) // a body without its last chunk is no body
				return
			}
			size, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(line, ";", 2)[0]), 16, 64)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if size == 0 {
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" || l == "\n" {
						break
					}
				}
				pw.Close()
				return
			}
			if _, err := io.CopyN(pw, br, size); err != nil {
				pw.CloseWithError(io.ErrUnexpectedEOF)
				return
			}
			_, _ = br.ReadString('\n')
		}
	}()
	return pr
}

var (
	hex32       = regexp.MustCompile(`^[0-9a-f]{32}$`)
	stickyToken = regexp.MustCompile(`=[0-9a-f]{16}\b`)
)

// canonical is a recorded request in a form two transports can be compared by: the request
// line, then the fields with lower-case names sorted (their order is no part of the
// semantics), request IDs Ballast made up masked, then the body.
func (r recorded) canonical() string {
	lines := strings.Split(strings.TrimRight(r.head, "\r\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], "\r")
	}
	fields := lines[1:]
	for i, f := range fields {
		k, v, _ := strings.Cut(f, ":")
		k, v = strings.ToLower(k), strings.TrimSpace(v)
		if k == "x-request-id" && hex32.MatchString(v) {
			v = "<generated>"
		}
		if k == "cookie" {
			v = stickyToken.ReplaceAllString(v, "=<token>") // names a backend whose port differs per run
		}
		fields[i] = k + ": " + v
	}
	sort.Strings(fields)
	return lines[0] + "\n" + strings.Join(fields, "\n") + "\n\n" + string(r.body)
}

// fields parses the recorded head's fields (names canonical, values as sent).
func (r recorded) fields() http.Header {
	h := http.Header{}
	lines := strings.Split(strings.TrimRight(r.head, "\r\n"), "\n")
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(strings.TrimRight(l, "\r"), ":")
		h.Add(k, strings.TrimSpace(v))
	}
	return h
}

func (r recorded) requestLine() string {
	l, _, _ := strings.Cut(r.head, "\n")
	return strings.TrimRight(l, "\r")
}

// parityEnv is one Ballast server of a case, serving the two listeners every transport uses,
// with the access log in a file of its own.
type parityEnv struct {
	srv      *server.Server
	log      string
	backends []*rawBackend
	logLines int  // lines already read
	noLog    bool // a line failed to come: wait no more for later ones
}

// listenerYAML is the listeners every case shares: a plain one that also takes h2c, a TLS one
// that negotiates h2 or http/1.1, and a TLS one with accept_proxy. extra (YAML lines) is
// added to each.
func listenerYAML(cert, key, extra string) string {
	ind := ""
	for _, l := range strings.Split(strings.TrimSpace(extra), "\n") {
		if l != "" {
			ind += "    " + l + "\n"
		}
	}
	return fmt.Sprintf(`listeners:
  - name: plain
    address: "127.0.0.1:0"
    h2c: true
    read_header_timeout: 1s
    expose_backend: true
%s  - name: tls
    address: "127.0.0.1:0"
    tls: {cert: "%s", key: "%s"}
    read_header_timeout: 1s
    expose_backend: true
%s  - name: tls-proxy
    address: "127.0.0.1:0"
    tls: {cert: "%s", key: "%s"}
    accept_proxy: true
    read_header_timeout: 1s
    expose_backend: true
%s`, ind, cert, key, ind, cert, key, ind)
}

// deadAddress is a loopback address nothing listens on (connections are refused).
func deadAddress(t *testing.T) string {
	return refused.TCP(t)
}

// startParity starts Ballast for one case: yaml may name the backends' addresses as {B0},
// {B1}…, a refusing address as {DEAD}, and files in a temporary directory as {DIR}.
func startParity(t *testing.T, listenerExtra, yaml string, backends []*rawBackend) *parityEnv {
	t.Helper()
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "cert", 1, "app.test")
	env := &parityEnv{log: filepath.Join(dir, "access.log"), backends: backends}
	repl := []string{"{DEAD}", deadAddress(t), "{DIR}", dir}
	for i, b := range backends {
		repl = append(repl, fmt.Sprintf("{B%d}", i), b.addr())
	}
	yaml = strings.NewReplacer(repl...).Replace(yaml)
	full := listenerYAML(cert, key, listenerExtra) + fmt.Sprintf("logging: {access: true, access_file: %q, access_format: json}\n", env.log) + yaml
	file := filepath.Join(dir, "ballast.yaml")
	if err := os.WriteFile(file, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, full)
	}
	s, err := server.Start(cfg, server.Options{File: file, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	env.srv = s
	return env
}

// logEntry is one access-log line.
type logEntry map[string]any

// nextLog waits (bounded) for the next access-log line and returns it, nil when none came.
func (env *parityEnv) nextLog(t *testing.T) logEntry {
	t.Helper()
	wait := 2 * time.Second
	if env.noLog {
		wait = 50 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		// Only whole lines: the writer may be part-way through one (a batch written in pieces).
		data, _ := os.ReadFile(env.log)
		whole := string(data[:bytes.LastIndexByte(data, '\n')+1])
		lines := strings.Split(strings.TrimSuffix(whole, "\n"), "\n")
		if len(whole) > 0 && len(lines) > env.logLines {
			line := lines[env.logLines]
			env.logLines++
			var e logEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Errorf("access log line is not JSON: %v\n%s", err, line)
				return nil
			}
			return e
		}
		if time.Now().After(deadline) {
			env.noLog = true
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// matchValue checks got against want: "" means absent, "~re" a regular expression, "*" any
// present value, anything else the exact value.
func matchValue(got []string, want string) bool {
	switch {
	case want == "":
		return len(got) == 0
	case want == "*":
		return len(got) > 0
	case strings.HasPrefix(want, "~"):
		return len(got) > 0 && regexp.MustCompile(want[1:]).MatchString(strings.Join(got, ", "))
	}
	return strings.Join(got, ", ") == want
}
