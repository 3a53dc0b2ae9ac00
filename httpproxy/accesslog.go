package httpproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

// AccessLog writes one line per request to a file or stderr, apart from the error log, as
// JSON or in the combined log format. Each line is one write(2) on a file opened O_APPEND, so
// lines from concurrent requests never interleave; Reopen (SIGUSR1) lets logrotate move the
// file away, as with nginx. Safe for concurrent use.
type AccessLog struct {
	path   string // empty: stderr
	format string
	out    atomic.Pointer[os.File]
}

// OpenAccessLog opens the access log of lc: lc.AccessFile (created, appended to) or stderr.
func OpenAccessLog(lc config.Logging) (*AccessLog, error) {
	l := &AccessLog{path: lc.AccessFile, format: lc.AccessFormat}
	if l.format == "" {
		l.format = config.AccessJSON
	}
	if l.path == "" {
		l.out.Store(os.Stderr)
		return l, nil
	}
	f, err := openLogFile(l.path)
	if err != nil {
		return nil, err
	}
	l.out.Store(f)
	return l, nil
}

func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Reopen opens the file again by its path and switches to it, so that after a rotation
// (rename, then SIGUSR1) new lines go to a new file. On error the old file stays in use. A
// log on stderr has nothing to reopen.
func (l *AccessLog) Reopen() error {
	if l.path == "" {
		return nil
	}
	f, err := openLogFile(l.path)
	if err != nil {
		return err
	}
	if old := l.out.Swap(f); old != nil {
		return old.Close() // a line being written to it finishes first (the fd is refcounted)
	}
	return nil
}

// Close closes the file; later lines are dropped.
func (l *AccessLog) Close() error {
	if l.path == "" {
		return nil
	}
	if f := l.out.Swap(nil); f != nil {
		return f.Close()
	}
	return nil
}

// same reports whether l already writes what lc asks for, so a reload keeps it.
func (l *AccessLog) same(lc config.Logging) bool {
	f := lc.AccessFormat
	if f == "" {
		f = config.AccessJSON
	}
	return l.path == lc.AccessFile && l.format == f
}

// accessEntry is what one line says. Byte slices point into the request and response, which
// outlive the write.
type accessEntry struct {
	listener  string
	client    netip.Addr
	method    []byte
	uri       []byte // as the client sent it, before any rewrite
	proto     []byte
	host      []byte
	status    int
	bytesIn   int64
	bytesOut  int64
	duration  time.Duration
	upstream  time.Duration // to the backend's response headers; 0 when none answered
	pool      string
	backend   string
	retries   int
	requestID []byte
	traceID   []byte
	referer   []byte
	userAgent []byte
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// write formats e and writes it as one line.
func (l *AccessLog) write(e *accessEntry) {
	bp := lineBufs.Get().(*[]byte)
	now := time.Now()
	var b []byte
	if l.format == config.AccessCombined {
		b = e.appendCombined((*bp)[:0], now)
	} else {
		b = e.appendJSON((*bp)[:0], now)
	}
	for range 2 {
		f := l.out.Load()
		if f == nil {
			break
		}
		if _, err := f.Write(b); !errors.Is(err, os.ErrClosed) {
			break // written, or an error a retry would not cure
		}
		// Reopen closed the file under us: write to the new one.
	}
	if cap(b) <= 64<<10 {
		*bp = b
		lineBufs.Put(bp)
	}
}

func (e *accessEntry) appendJSON(b []byte, now time.Time) []byte {
	b = append(b, `{"time":"`...)
	b = now.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","listener":`...)
	b = appendJSONString(b, e.listener)
	b = append(b, `,"client":"`...)
	b = appendAddr(b, e.client)
	b = append(b, `","method":`...)
	b = appendJSONBytes(b, e.method)
	b = append(b, `,"uri":`...)
	b = appendJSONBytes(b, e.uri)
	b = append(b, `,"proto":`...)
	b = appendJSONBytes(b, e.proto)
	b = append(b, `,"host":`...)
	b = appendJSONBytes(b, e.host)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, e.bytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, e.bytesOut, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.duration.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"upstream_ms":`...)
	b = strconv.AppendFloat(b, float64(e.upstream.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, e.pool)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, e.backend)
	b = append(b, `,"retries":`...)
	b = strconv.AppendInt(b, int64(e.retries), 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONBytes(b, e.requestID)
	b = append(b, `,"trace_id":`...)
	b = appendJSONBytes(b, e.traceID)
	b = append(b, `,"referer":`...)
	b = appendJSONBytes(b, e.referer)
	b = append(b, `,"user_agent":`...)
	b = appendJSONBytes(b, e.userAgent)
	return append(b, "}\n"...)
}

// appendCombined writes the NCSA combined format (Apache's and nginx's "combined"), then the
// fields it lacks as key=value pairs, which log tools that read combined skip or parse.
func (e *accessEntry) appendCombined(b []byte, now time.Time) []byte {
	b = appendAddr(b, e.client)
	b = append(b, " - - ["...)
	b = now.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendQuoted(b, e.method)
	b = append(b, ' ')
	b = appendQuoted(b, e.uri)
	b = append(b, ' ')
	b = appendQuoted(b, e.proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.bytesOut, 10)
	b = append(b, ` "`...)
	b = appendQuotedOrDash(b, e.referer)
	b = append(b, `" "`...)
	b = appendQuotedOrDash(b, e.userAgent)
	b = append(b, `" rid=`...)
	b = appendQuotedOrDash(b, e.requestID)
	b = append(b, " in="...)
	b = strconv.AppendInt(b, e.bytesIn, 10)
	b = append(b, " rt="...)
	b = strconv.AppendFloat(b, e.duration.Seconds(), 'f', 3, 64)
	b = append(b, " ut="...)
	b = strconv.AppendFloat(b, e.upstream.Seconds(), 'f', 3, 64)
	b = append(b, " retries="...)
	b = strconv.AppendInt(b, int64(e.retries), 10)
	b = append(b, " pool="...)
	b = appendQuotedOrDash(b, s2b(e.pool))
	b = append(b, " backend="...)
	b = appendQuotedOrDash(b, s2b(e.backend))
	return append(b, '\n')
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, '-')
	}
	return a.AppendTo(b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte { return appendJSONBytes(b, s2b(s)) }

func appendJSONBytes(b, s []byte) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// appendQuoted appends s for a double-quoted field of the combined format: '"' and '\' are
// escaped and bytes outside printable ASCII written as \xHH, as nginx does.
func appendQuoted(b, s []byte) []byte {
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendQuotedOrDash(b, s []byte) []byte {
	if len(s) == 0 {
		return append(b, '-')
	}
	return appendQuoted(b, s)
}

// requestBytes is the size of the request body as received: its Content-Length, or what was
// streamed of a chunked one.
func requestBytes(ctx *fasthttp.RequestCtx, x *exchange) int64 {
	if x.up.n > 0 {
		return x.up.n
	}
	if cl := ctx.Request.Header.ContentLength(); cl > 0 {
		return int64(cl)
	}
	return 0
}

// openAccessLog installs the access log lc asks for: it keeps the open one when nothing
// changed, opens the new one before closing the old, and closes it when access is off.
func (p *Proxy) openAccessLog(lc config.Logging) error {
	cur := p.access.Load()
	if !lc.Access {
		if cur != nil {
			p.access.Store(nil)
			return cur.Close()
		}
		return nil
	}
	if cur != nil && cur.same(lc) {
		return nil
	}
	l, err := OpenAccessLog(lc)
	if err != nil {
		return err
	}
	p.access.Store(l)
	if cur != nil {
		return cur.Close()
	}
	return nil
}

// ReopenAccessLog reopens the access log file (SIGUSR1, after logrotate moved it).
func (p *Proxy) ReopenAccessLog() error {
	if l := p.access.Load(); l != nil {
		return l.Reopen()
	}
	return nil
}
