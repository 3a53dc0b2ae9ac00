package accesslog

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"ballast/config"
)

// Log writes one line per Entry to a file or stderr. Safe for concurrent use.
type Log struct {
	path   string // empty: stderr
	format string
	out    atomic.Pointer[os.File]
}

// Open opens the access log of lc: lc.AccessFile (created, appended to) or stderr.
func Open(lc config.Logging) (*Log, error) {
	l := &Log{path: lc.AccessFile, format: formatOf(lc)}
	if l.path == "" {
		l.out.Store(os.Stderr)
		return l, nil
	}
	f, err := openFile(l.path)
	if err != nil {
		return nil, err
	}
	l.out.Store(f)
	return l, nil
}

func formatOf(lc config.Logging) string {
	if lc.AccessFormat == "" {
		return config.AccessJSON
	}
	return lc.AccessFormat
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Reopen opens the file again by its path and switches to it, so that after a rotation
// (rename, then SIGUSR1) new lines go to a new file. On error the old file stays in use. A
// log on stderr has nothing to reopen.
func (l *Log) Reopen() error {
	if l.path == "" {
		return nil
	}
	f, err := openFile(l.path)
	if err != nil {
		return err
	}
	if old := l.out.Swap(f); old != nil {
		return old.Close() // a line being written to it finishes first (the fd is refcounted)
	}
	return nil
}

// Close closes the file; later lines are dropped.
func (l *Log) Close() error {
	if l.path == "" {
		return nil
	}
	if f := l.out.Swap(nil); f != nil {
		return f.Close()
	}
	return nil
}

// Same reports whether l already writes what lc asks for, so a reload keeps it.
func (l *Log) Same(lc config.Logging) bool {
	return l.path == lc.AccessFile && l.format == formatOf(lc)
}

// Entry is what one line says. Byte slices may point into a request and response that
// outlive the Write.
type Entry struct {
	Listener  string
	Client    netip.Addr
	Method    []byte
	URI       []byte // as the client sent it, before any rewrite
	Proto     []byte
	Host      []byte
	Status    int
	BytesIn   int64
	BytesOut  int64
	Duration  time.Duration
	Upstream  time.Duration // to the backend's response headers; 0 when none answered
	Pool      string
	Backend   string
	Retries   int
	RequestID []byte
	TraceID   []byte
	Referer   []byte
	UserAgent []byte
	// Termination says how the request or connection ended, as HAProxy's two-character
	// termination state: who or what ended it, then in which phase; "--" for a normal end.
	// Empty when the plane does not say.
	Termination string

	// The L4 planes' fields, which the HTTP planes leave empty. Transport ("tcp", "udp") makes
	// the line a connection's (or a flow's): the formats then leave out the request's fields
	// (method, URI, status...) and write the client's port and the backend's address. BytesIn
	// and BytesOut are then what moved each way, Upstream the connect time.
	Transport      string
	ClientPort     uint16
	BackendAddress string
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Write formats e and writes it as one line.
func (l *Log) Write(e *Entry) {
	bp := lineBufs.Get().(*[]byte)
	b := l.AppendLine((*bp)[:0], e, time.Now())
	l.WriteLines(b)
	if cap(b) <= 64<<10 {
		*bp = b
		lineBufs.Put(bp)
	}
}

func (e *Entry) appendJSON(b []byte, now time.Time) []byte {
	b = append(b, `{"time":"`...)
	b = now.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	if e.Transport != "" {
		return e.appendJSONL4(b)
	}
	b = append(b, `","listener":`...)
	b = appendJSONString(b, e.Listener)
	b = append(b, `,"client":"`...)
	b = appendAddr(b, e.Client)
	b = append(b, `","method":`...)
	b = appendJSONBytes(b, e.Method)
	b = append(b, `,"uri":`...)
	b = appendJSONBytes(b, e.URI)
	b = append(b, `,"proto":`...)
	b = appendJSONBytes(b, e.Proto)
	b = append(b, `,"host":`...)
	b = appendJSONBytes(b, e.Host)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"upstream_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Upstream.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, e.Pool)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, e.Backend)
	b = append(b, `,"retries":`...)
	b = strconv.AppendInt(b, int64(e.Retries), 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONBytes(b, e.RequestID)
	b = append(b, `,"trace_id":`...)
	b = appendJSONBytes(b, e.TraceID)
	b = append(b, `,"referer":`...)
	b = appendJSONBytes(b, e.Referer)
	b = append(b, `,"user_agent":`...)
	b = appendJSONBytes(b, e.UserAgent)
	b = append(b, `,"termination":`...)
	b = appendJSONString(b, e.Termination)
	return append(b, "}\n"...)
}

// appendJSONL4 is a connection's (or flow's) line, after its time.
func (e *Entry) appendJSONL4(b []byte) []byte {
	b = append(b, `","transport":`...)
	b = appendJSONString(b, e.Transport)
	b = append(b, `,"listener":`...)
	b = appendJSONString(b, e.Listener)
	b = append(b, `,"client":"`...)
	b = appendAddr(b, e.Client)
	b = append(b, `","client_port":`...)
	b = strconv.AppendUint(b, uint64(e.ClientPort), 10)
	b = append(b, `,"pool":`...)
	b = appendJSONString(b, e.Pool)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, e.Backend)
	b = append(b, `,"backend_address":`...)
	b = appendJSONString(b, e.BackendAddress)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"connect_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Upstream.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"retries":`...)
	b = strconv.AppendInt(b, int64(e.Retries), 10)
	b = append(b, `,"termination":`...)
	b = appendJSONString(b, e.Termination)
	return append(b, "}\n"...)
}

// appendCombinedL4 is a connection's (or flow's) line in the combined format's shape: the
// request is "TRANSPORT BACKEND_ADDRESS -", the status "-", the size what the backend sent.
func (e *Entry) appendCombinedL4(b []byte, now time.Time) []byte {
	b = appendAddr(b, e.Client)
	b = append(b, " - - ["...)
	b = now.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	for i := 0; i < len(e.Transport); i++ {
		c := e.Transport[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	b = append(b, ' ')
	b = appendQuotedOrDash(b, s2b(e.BackendAddress))
	b = append(b, ` -" - `...)
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, ` "-" "-" port=`...)
	b = strconv.AppendUint(b, uint64(e.ClientPort), 10)
	b = append(b, " in="...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, " rt="...)
	b = strconv.AppendFloat(b, e.Duration.Seconds(), 'f', 3, 64)
	b = append(b, " ct="...)
	b = strconv.AppendFloat(b, e.Upstream.Seconds(), 'f', 3, 64)
	b = append(b, " retries="...)
	b = strconv.AppendInt(b, int64(e.Retries), 10)
	b = append(b, " listener="...)
	b = appendQuotedOrDash(b, s2b(e.Listener))
	b = append(b, " pool="...)
	b = appendQuotedOrDash(b, s2b(e.Pool))
	b = append(b, " backend="...)
	b = appendQuotedOrDash(b, s2b(e.Backend))
	b = append(b, " term="...)
	b = appendQuotedOrDash(b, s2b(e.Termination))
	return append(b, '\n')
}

// appendCombined writes the NCSA combined format (Apache's and nginx's "combined"), then the
// fields it lacks as key=value pairs, which log tools that read combined skip or parse.
func (e *Entry) appendCombined(b []byte, now time.Time) []byte {
	if e.Transport != "" {
		return e.appendCombinedL4(b, now)
	}
	b = appendAddr(b, e.Client)
	b = append(b, " - - ["...)
	b = now.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendQuoted(b, e.Method)
	b = append(b, ' ')
	b = appendQuoted(b, e.URI)
	b = append(b, ' ')
	b = appendQuoted(b, e.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, ` "`...)
	b = appendQuotedOrDash(b, e.Referer)
	b = append(b, `" "`...)
	b = appendQuotedOrDash(b, e.UserAgent)
	b = append(b, `" rid=`...)
	b = appendQuotedOrDash(b, e.RequestID)
	b = append(b, " in="...)
	b = strconv.AppendInt(b, e.BytesIn, 10)
	b = append(b, " rt="...)
	b = strconv.AppendFloat(b, e.Duration.Seconds(), 'f', 3, 64)
	b = append(b, " ut="...)
	b = strconv.AppendFloat(b, e.Upstream.Seconds(), 'f', 3, 64)
	b = append(b, " retries="...)
	b = strconv.AppendInt(b, int64(e.Retries), 10)
	b = append(b, " pool="...)
	b = appendQuotedOrDash(b, s2b(e.Pool))
	b = append(b, " backend="...)
	b = appendQuotedOrDash(b, s2b(e.Backend))
	b = append(b, " term="...)
	b = appendQuotedOrDash(b, s2b(e.Termination))
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

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Switch holds the access log of the current configuration; the zero Switch holds none.
type Switch struct{ cur atomic.Pointer[Log] }

// Load returns the current log, nil when access logging is off.
func (s *Switch) Load() *Log { return s.cur.Load() }

// Set installs the log lc asks for: it keeps the open one when nothing changed, opens the new
// one before closing the old, and closes it when access logging is off. On error the old log
// stays.
func (s *Switch) Set(lc config.Logging) error {
	cur := s.cur.Load()
	if !lc.Access {
		if cur != nil {
			s.cur.Store(nil)
			return cur.Close()
		}
		return nil
	}
	if cur != nil && cur.Same(lc) {
		return nil
	}
	l, err := Open(lc)
	if err != nil {
		return err
	}
	s.cur.Store(l)
	if cur != nil {
		return cur.Close()
	}
	return nil
}

// Reopen reopens the current log's file (SIGUSR1, after logrotate moved it).
func (s *Switch) Reopen() error {
	if l := s.cur.Load(); l != nil {
		return l.Reopen()
	}
	return nil
}
