package server_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// A raw recording HTTP/2 backend for the parity suite, on x/net's Framer and hpack (not
// x/net's server), so that it records exactly what Ballast sent on each stream (the
// pseudo-header fields and the fields in order, DATA, trailers, a RST_STREAM) and answers
// with exactly what a case needs. It is a rawBackend with h2 set: the same script of answers
// (an HTTP/1.1 answer is sent as its HTTP/2 equivalent: the status, the fields in order but
// transfer-encoding, a Content-Length body as one DATA frame, a chunked body as one DATA
// frame per chunk, chunked trailers as trailing HEADERS), "hang" and "sleep D", and answers
// of its own:
//
//	h2:refuse   RST_STREAM(REFUSED_STREAM): not processed
//	h2:reset    RST_STREAM(INTERNAL_ERROR) after the whole request: maybe processed
//	h2:goaway   GOAWAY(last stream 0, NO_ERROR), then the connection closes: not processed
//	h2:goaway-last  GOAWAY(last stream this one), then the connection closes: maybe processed
//	h2:close    the connection closes without a word: maybe processed
//
// A backend's answers separated by thenAnswer are used in turn (the last repeats).

const thenAnswer = "\n--then--\n"

// h2Record is what Ballast sent on one stream.
type h2Record struct {
	pseudo   []hpack.HeaderField // in the order sent
	fields   []hpack.HeaderField // in the order sent
	trailers []hpack.HeaderField
	data     int // DATA frames with a payload
}

// newH2RawBackend is an HTTP/2 rawBackend: prior knowledge (h2c) when tc is nil, else TLS
// with ALPN h2 on tc's certificate.
func newH2RawBackend(t *testing.T, tc *tls.Config, answers ...string) *rawBackend {
	t.Helper()
	if tc != nil {
		tc = tc.Clone()
		tc.NextProtos = []string{"h2"}
	}
	return newRawBackendProto(t, tc, true, answers...)
}

// h2BConn is one HTTP/2 connection from Ballast to an h2 rawBackend.
type h2BConn struct {
	rb *rawBackend
	c  net.Conn
	bw *bufio.Writer
	fr *http2.Framer

	mu       sync.Mutex // the Framer's writes, the windows, the streams
	cond     *sync.Cond
	dead     bool
	connWin  int64
	initWin  int64
	maxFrame int
	streams  map[uint32]*h2BStream
	hb       bytes.Buffer
	enc      *hpack.Encoder
	answers  sync.WaitGroup
}

type h2BStream struct {
	id   uint32
	rec  recorded
	body []byte
	win  int64
	done bool // the request ended (END_STREAM)
	gone bool // reset by Ballast, or answered
	hang bool // waiting for Ballast to give up (answer "hang")
}

func (rb *rawBackend) serveH2(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	hc := &h2BConn{rb: rb, c: c, bw: bufio.NewWriterSize(c, 64<<10), connWin: 65535, initWin: 65535, maxFrame: 16384,
		streams: map[uint32]*h2BStream{}}
	hc.fr = http2.NewFramer(hc.bw, c)
	hc.cond = sync.NewCond(&hc.mu)
	hc.enc = hpack.NewEncoder(&hc.hb)
	hc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	hc.fr.MaxHeaderListSize = 1 << 20
	hc.write(func() error {
		if err := hc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20},
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100}); err != nil {
			return err
		}
		return hc.fr.WriteWindowUpdate(0, 1<<30)
	})
	defer func() {
		hc.mu.Lock()
		hc.dead = true
		hung := 0
		for _, s := range hc.streams {
			if s.hang && !s.gone {
				hung++
			}
		}
		hc.cond.Broadcast()
		hc.mu.Unlock()
		for range hung {
			rb.closed <- struct{}{}
		}
		c.Close()
		hc.answers.Wait()
	}()
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			return
		}
		if !hc.frame(f) {
			return
		}
	}
}

// write runs fn (Framer writes) under the lock and flushes.
func (hc *h2BConn) write(fn func() error) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.writeLocked(fn)
}

func (hc *h2BConn) writeLocked(fn func() error) bool {
	if hc.dead {
		return false
	}
	if err := fn(); err != nil {
		hc.dead = true
		hc.c.Close()
		return false
	}
	if err := hc.bw.Flush(); err != nil {
		hc.dead = true
		hc.c.Close()
		return false
	}
	return true
}

// frame handles one frame from Ballast; false ends the connection.
func (hc *h2BConn) frame(f http2.Frame) bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return true
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			for _, s := range hc.streams {
				s.win += int64(v) - hc.initWin
			}
			hc.initWin = int64(v)
		}
		if v, ok := f.Value(http2.SettingMaxFrameSize); ok {
			hc.maxFrame = int(v)
		}
		hc.cond.Broadcast()
		return hc.writeLocked(func() error { return hc.fr.WriteSettingsAck() })
	case *http2.PingFrame:
		if !f.IsAck() {
			return hc.writeLocked(func() error { return hc.fr.WritePing(true, f.Data) })
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			hc.connWin += int64(f.Increment)
		} else if s := hc.streams[f.StreamID]; s != nil {
			s.win += int64(f.Increment)
		}
		hc.cond.Broadcast()
	case *http2.MetaHeadersFrame:
		s := hc.streams[f.StreamID]
		if s == nil {
			s = &h2BStream{id: f.StreamID, win: hc.initWin, rec: recorded{h2: &h2Record{}}}
			hc.streams[f.StreamID] = s
			var head strings.Builder
			pseudo := map[string]string{}
			for _, hf := range f.Fields {
				if strings.HasPrefix(hf.Name, ":") {
					s.rec.h2.pseudo = append(s.rec.h2.pseudo, hf)
					pseudo[hf.Name] = hf.Value
				} else {
					s.rec.h2.fields = append(s.rec.h2.fields, hf)
				}
			}
			// The head as the suite's checks read it: a request line of HTTP/2.0, :authority
			// as Host, then the fields in the order sent.
			target := pseudo[":path"]
			if pseudo[":method"] == "CONNECT" {
				target = pseudo[":authority"]
			}
			fmt.Fprintf(&head, "%s %s HTTP/2.0\r\n", pseudo[":method"], target)
			if a, ok := pseudo[":authority"]; ok {
				fmt.Fprintf(&head, "Host: %s\r\n", a)
			}
			for _, hf := range s.rec.h2.fields {
				fmt.Fprintf(&head, "%s: %s\r\n", hf.Name, hf.Value)
			}
			head.WriteString("\r\n")
			s.rec.head = head.String()
		} else {
			s.rec.h2.trailers = append(s.rec.h2.trailers, f.Fields...)
		}
		if f.StreamEnded() {
			hc.ended(s)
		}
	case *http2.DataFrame:
		if n := len(f.Data()); n > 0 {
			if !hc.writeLocked(func() error {
				if err := hc.fr.WriteWindowUpdate(0, uint32(n)); err != nil {
					return err
				}
				if f.StreamEnded() {
					return nil
				}
				return hc.fr.WriteWindowUpdate(f.StreamID, uint32(n))
			}) {
				return false
			}
		}
		s := hc.streams[f.StreamID]
		if s == nil {
			return true
		}
		if len(f.Data()) > 0 {
			s.rec.h2.data++
			s.body = append(s.body, f.Data()...)
		}
		if f.StreamEnded() {
			hc.ended(s)
		}
	case *http2.RSTStreamFrame:
		if s := hc.streams[f.StreamID]; s != nil && !s.gone {
			s.gone = true
			if s.hang {
				hc.rb.closed <- struct{}{}
			}
			hc.cond.Broadcast()
		}
	case *http2.GoAwayFrame:
	}
	return true
}

// ended records a whole request and starts its answer (called with hc.mu held).
func (hc *h2BConn) ended(s *h2BStream) {
	if s.done {
		return
	}
	s.done = true
	s.rec.body = s.body
	rb := hc.rb
	rb.mu.Lock()
	rb.reqs = append(rb.reqs, s.rec)
	answer := rb.answers[min(len(rb.reqs), len(rb.answers))-1]
	rb.mu.Unlock()
	switch answer {
	case "hang":
		s.hang = true
		return
	case "h2:refuse", "h2:reset":
		code := http2.ErrCodeRefusedStream
		if answer == "h2:reset" {
			code = http2.ErrCodeInternal
		}
		s.gone = true
		hc.writeLocked(func() error { return hc.fr.WriteRSTStream(s.id, code) })
		return
	case "h2:goaway", "h2:goaway-last":
		last := uint32(0)
		if answer == "h2:goaway-last" {
			last = s.id
		}
		hc.writeLocked(func() error { return hc.fr.WriteGoAway(last, http2.ErrCodeNo, nil) })
		hc.dead = true
		hc.c.Close()
		return
	case "h2:close":
		hc.dead = true
		hc.c.Close()
		return
	}
	hc.answers.Add(1)
	go func() {
		defer hc.answers.Done()
		if d, ok := strings.CutPrefix(answer, "sleep "); ok {
			dur, _ := time.ParseDuration(d)
			time.Sleep(dur)
			answer = okAnswer
		}
		hc.answer(s, answer)
	}()
}

// answer sends an HTTP/1.1 answer's HTTP/2 equivalent on s.
func (hc *h2BConn) answer(s *h2BStream, answer string) {
	status, fields, pieces, trailers := h2Translate(answer)
	for _, f := range s.rec.h2.pseudo {
		if f.Name == ":method" && f.Value == "HEAD" {
			pieces = nil // the head only, its content-length kept
		}
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	header := func(fs []hpack.HeaderField, end bool) bool {
		hc.hb.Reset()
		for _, f := range fs {
			_ = hc.enc.WriteField(f)
		}
		block := append([]byte(nil), hc.hb.Bytes()...)
		return hc.writeLocked(func() error {
			return hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: block, EndHeaders: true, EndStream: end})
		})
	}
	head := append([]hpack.HeaderField{{Name: ":status", Value: strconv.Itoa(status)}}, fields...)
	if s.gone || !header(head, len(pieces) == 0 && len(trailers) == 0) {
		return
	}
	for i, p := range pieces {
		last := i == len(pieces)-1 && len(trailers) == 0
		for len(p) > 0 {
			for !hc.dead && !s.gone && len(p) > 0 && (hc.connWin <= 0 || s.win <= 0) {
				hc.cond.Wait()
			}
			if hc.dead || s.gone {
				return
			}
			n := min(len(p), hc.maxFrame, int(min(hc.connWin, s.win)))
			chunk := p[:n]
			p = p[n:]
			hc.connWin -= int64(n)
			s.win -= int64(n)
			if !hc.writeLocked(func() error { return hc.fr.WriteData(s.id, last && len(p) == 0, chunk) }) {
				return
			}
		}
	}
	if len(trailers) > 0 {
		header(trailers, true)
	}
	s.gone = true
}

// h2Translate reads an HTTP/1.1 answer as the HTTP/2 response it stands for: the status, the
// fields (names in lower case, transfer-encoding left out), the body's pieces (one per
// chunk of a chunked body) and the trailers.
func h2Translate(answer string) (int, []hpack.HeaderField, [][]byte, []hpack.HeaderField) {
	br := bufio.NewReader(strings.NewReader(answer))
	line, _ := br.ReadString('\n')
	status := 502
	if f := strings.Fields(line); len(f) >= 2 {
		status, _ = strconv.Atoi(f[1])
	}
	var fields []hpack.HeaderField
	chunked, length := false, -1
	for {
		l, err := br.ReadString('\n')
		l = strings.TrimRight(l, "\r\n")
		if err != nil || l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch k {
		case "transfer-encoding":
			chunked = true
			continue
		case "content-length":
			length, _ = strconv.Atoi(v)
		}
		fields = append(fields, hpack.HeaderField{Name: k, Value: v})
	}
	var pieces [][]byte
	var trailers []hpack.HeaderField
	switch {
	case chunked:
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				break
			}
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(l, ";", 2)[0]), 16, 64)
			if n == 0 {
				for {
					t, err := br.ReadString('\n')
					t = strings.TrimRight(t, "\r\n")
					if err != nil || t == "" {
						break
					}
					k, v, _ := strings.Cut(t, ":")
					trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(strings.TrimSpace(k)), Value: strings.TrimSpace(v)})
				}
				break
			}
			p := make([]byte, n)
			_, _ = io.ReadFull(br, p)
			_, _ = br.ReadString('\n')
			pieces = append(pieces, p)
		}
	case length > 0:
		p := make([]byte, length)
		_, _ = io.ReadFull(br, p)
		pieces = append(pieces, p)
	}
	return status, fields, pieces, trailers
}
