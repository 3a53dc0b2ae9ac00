package h1

import (
	"bytes"

	"ballast/httpcore"
)

// The engine reads message heads itself, before fasthttp's header parser sees them: it finds
// where a head ends (so that a head split across reads is never handed to the parser
// incomplete), and it decides the request's framing and refuses what two parsers could
// disagree on (RFC 9112 §11.2 request smuggling), in one pass over the wire bytes. fasthttp
// then parses the accepted head into the structure the forwarded head is written from.

// headEnd finds the end of a head in b: the offset just past its blank line, or 0 when b
// holds no complete head yet. *from is where scanning resumes (the start of the first line
// not yet scanned), so bytes arriving one at a time cost one pass in all. A line is ended by
// LF; the blank line is CRLF or a bare LF (the request checks refuse the latter). Empty
// lines before the first line are not its end (skipEmptyLines drops them, however many, as
// the fasthttp plane does).
func headEnd(b []byte, from *int) int {
	p := *from
	for p < len(b) {
		i := bytes.IndexByte(b[p:], '\n')
		if i < 0 {
			break
		}
		line := b[p : p+i]
		if (len(line) == 0 || len(line) == 1 && line[0] == '\r') && !afterEmptyLine(b, p) {
			*from = 0
			return p + i + 1
		}
		p += i + 1
	}
	*from = p
	return 0
}

// afterEmptyLine reports whether the line that starts at p is the first of b or follows an
// empty one: an empty line there still precedes the request line (an empty line after a
// non-empty one ended the head already). O(1), so that a head of empty lines costs one pass.
func afterEmptyLine(b []byte, p int) bool {
	return p == 0 || p == 1 || b[p-2] == '\n' || b[p-2] == '\r' && (p == 2 || b[p-3] == '\n')
}

// skipEmptyLines returns how many bytes of empty lines (CRLF or LF) precede a request line
// (RFC 9112 §2.2 lets a server ignore them).
func skipEmptyLines(b []byte) int {
	n := 0
	for {
		switch {
		case len(b) >= n+2 && b[n] == '\r' && b[n+1] == '\n':
			n += 2
		case len(b) >= n+1 && b[n] == '\n':
			n++
		default:
			return n
		}
	}
}

// verdict is what the head checks decided.
type verdict uint8

const (
	headOK          verdict = iota
	headMalformed           // not an HTTP/1.x head at all, or a framing field that is not one
	headBadName             // a field name that is not a token, obs-fold, a control byte
	headBadTarget           // a target that is not origin-, absolute- or asterisk-form
	headConnect             // CONNECT: nothing to tunnel it to
	headBothLengths         // Transfer-Encoding with Content-Length, or other than chunked
	headBadVersion          // HTTP/d.d other than 1.0 and 1.1
	headUpgradeBody         // a protocol switch with a body
	headBadHost             // Host missing (HTTP/1.1), repeated, or not host[:port]
	headTooLarge            // over max_header_bytes
	headTimeout             // not whole within read_header_timeout
	headBareLF              // the head's last line or blank line ended by a bare LF
)

// message and status are the client's answer to a refused head.
func (v verdict) message() string {
	switch v {
	case headBadName:
		return "ballast: invalid header field name\n"
	case headBadTarget:
		return "ballast: invalid request target\n"
	case headConnect:
		return "ballast: CONNECT is not supported\n"
	case headBothLengths:
		return "ballast: both Content-Length and Transfer-Encoding\n"
	case headBadVersion:
		return "ballast: HTTP version not supported\n"
	case headUpgradeBody:
		return "ballast: Upgrade with a request body\n"
	case headBadHost:
		return "ballast: missing or invalid Host\n"
	case headTooLarge:
		return "ballast: request header too large\n"
	case headTimeout:
		return "ballast: request timeout\n"
	case headBareLF:
		return "ballast: request head ends with a bare LF\n"
	}
	return "ballast: malformed request\n"
}

func (v verdict) status() int {
	switch v {
	case headConnect:
		return 405
	case headBadVersion:
		return 505
	case headTooLarge:
		return 431
	case headTimeout:
		return 408
	}
	return 400
}

// reqHead is what the checks learnt about a request head.
type reqHead struct {
	method, target []byte
	http10         bool
	clen           int64 // Content-Length; -1 when absent
	chunked        bool  // Transfer-Encoding: chunked
	hosts          int
	host           []byte // the Host field's value
	authority      []byte // an absolute-form target's authority, which replaces Host
	connClose      bool   // Connection: close
	connKeepAlive  bool   // Connection: keep-alive
	connUpgrade    bool   // Connection: upgrade
	upgrade        bool   // an Upgrade field
	expect100      bool   // Expect: 100-continue
	// scan is the core's note of the fields (hop-by-hop ones, forwarding ones), taken in the
	// same pass (a pass over fasthttp's fields would make it parse Cookie into pairs, which
	// it then writes instead of the client's field).
	scan httpcore.Scan
}

// hasBody reports whether the request has a body to read.
func (r *reqHead) hasBody() bool { return r.chunked || r.clen > 0 }

// isUpgrade reports a protocol switch (RFC 9110 §7.8): Upgrade named by Connection.
func (r *reqHead) isUpgrade() bool { return r.upgrade && r.connUpgrade }

// maxContentLength bounds a Content-Length (18 digits: no int64 overflow).
const maxContentLengthDigits = 18

// checkRequest checks a complete request head (the request line through the blank line) and
// fills r. It allocates nothing; r's slices point into head.
func checkRequest(head []byte, r *reqHead) verdict {
	*r = reqHead{clen: -1}
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 {
		return headMalformed
	}
	line := head[:eol]
	if line[len(line)-1] == '\r' { // a request line ended by a bare LF is taken, as fasthttp does
		line = line[:len(line)-1]
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return headMalformed
	}
	r.method = line[:sp]
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp < 0 {
		return headMalformed // HTTP/0.9
	}
	r.target, rest = rest[:sp], rest[sp+1:]
	switch {
	case bytes.Equal(rest, http11):
	case bytes.Equal(rest, http10):
		r.http10 = true
	case len(rest) == 8 && bytes.HasPrefix(rest, []byte("HTTP/")) && isDigit(rest[5]) && rest[6] == '.' && isDigit(rest[7]):
		return headBadVersion
	default:
		return headMalformed
	}
	if string(r.method) == "CONNECT" {
		return headConnect
	}
	if !httpcore.IsToken(r.method) {
		return headBadName
	}
	if v := r.scanFields(head[eol+1:]); v != headOK {
		return v
	}
	if r.chunked && (r.clen >= 0 || r.http10) {
		return headBothLengths
	}
	for _, c := range r.target {
		if c <= ' ' || c >= 0x7f {
			return headBadTarget
		}
	}
	switch {
	case len(r.target) > 0 && r.target[0] == '/':
	case len(r.target) == 1 && r.target[0] == '*':
		if string(r.method) != "OPTIONS" {
			return headBadTarget
		}
	default:
		a, ok := httpcore.AbsoluteAuthority(r.target)
		if !ok {
			return headBadTarget
		}
		r.authority = a
	}
	if r.authority == nil {
		switch {
		case r.hosts == 0 && !r.http10:
			return headBadHost
		case r.hosts > 0 && !httpcore.ValidAuthority(r.host):
			return headBadHost
		}
	}
	if r.isUpgrade() && r.hasBody() {
		return headUpgradeBody
	}
	return headOK
}

// scanFields checks the field lines of a request head: every line a token, a colon and a
// value without control bytes; no obs-fold; the last field line and the blank line ended by
// CRLF (a bare LF between fields is taken, as fasthttp does). It records the framing fields.
func (r *reqHead) scanFields(b []byte) verdict {
	cls, tes := 0, 0
	for len(b) > 0 {
		eol := bytes.IndexByte(b, '\n')
		if eol < 0 {
			return headMalformed
		}
		line := b[:eol]
		crlf := eol > 0 && line[eol-1] == '\r'
		if crlf {
			line = line[:eol-1]
		}
		b = b[eol+1:]
		if len(line) == 0 {
			if !crlf {
				return headBareLF // the blank line must be CRLF
			}
			break
		}
		if !crlf && (len(b) == 0 || b[0] == '\r' || b[0] == '\n') {
			return headBareLF // the last field line ended by a bare LF
		}
		if line[0] == ' ' || line[0] == '\t' {
			return headBadName // obs-fold (RFC 9112 §5.2)
		}
		i := 0
		for i < len(line) && httpcore.IsTChar(line[i]) {
			i++
		}
		if i == 0 || i == len(line) || line[i] != ':' {
			return headBadName
		}
		name, value := line[:i], trimOWS(line[i+1:])
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return headBadName // NUL, bare CR and other control bytes
			}
		}
		r.scan.Note(name)
		switch {
		case httpcore.LowerEqualFold(name, "content-length"):
			cls++
			if cls > 1 {
				return headMalformed // even with equal values: no list, no repetition
			}
			n, ok := parseLength(value)
			if !ok {
				return headMalformed
			}
			r.clen = n
		case httpcore.LowerEqualFold(name, "transfer-encoding"):
			tes++
			if tes > 1 || !httpcore.LowerEqualFold(value, "chunked") {
				return headBothLengths
			}
			r.chunked = true
		case httpcore.LowerEqualFold(name, "host"):
			r.hosts++
			if r.hosts > 1 {
				return headBadHost
			}
			r.host = value
		case httpcore.LowerEqualFold(name, "connection"):
			forEachToken(value, func(tok []byte) {
				switch {
				case httpcore.LowerEqualFold(tok, "close"):
					r.connClose = true
				case httpcore.LowerEqualFold(tok, "keep-alive"):
					r.connKeepAlive = true
				case httpcore.LowerEqualFold(tok, "upgrade"):
					r.connUpgrade = true
				}
			})
		case httpcore.LowerEqualFold(name, "upgrade"):
			r.upgrade = true
		case httpcore.LowerEqualFold(name, "expect"):
			r.expect100 = httpcore.LowerEqualFold(value, "100-continue")
		}
	}
	return headOK
}

// parseLength parses a Content-Length value: digits only.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > maxContentLengthDigits {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// respHead is what the engine needs to know of a backend's response head.
type respHead struct {
	status    int
	clen      int64 // -1 absent
	chunked   bool
	close     bool // Connection: close
	ambiguous bool // both framing fields, or repeated: answer, then close the connection
	upgrade   bool // Connection: upgrade (with a 101)
	// conn holds the names the Connection field lists (hop-by-hop for this message); more
	// than fit make the head refused.
	conn  [8][]byte
	nconn int
	// scan is the core's note of the fields (hop-by-hop ones, forwarding ones), taken in the
	// same pass.
	scan httpcore.Scan
}

// checkResponse reads a response head's status and framing fields. Backends are taken more
// leniently than clients (bare LF lines are accepted); framing that could be read two ways
// makes the connection unusable after the response.
func checkResponse(head []byte, r *respHead) bool {
	*r = respHead{clen: -1}
	eol := bytes.IndexByte(head, '\n')
	if eol < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.")) || head[8] != ' ' {
		return false
	}
	code := head[9:12]
	if !isDigit(code[0]) || !isDigit(code[1]) || !isDigit(code[2]) {
		return false
	}
	r.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	cls := 0
	b := head[eol+1:]
	for len(b) > 0 {
		eol = bytes.IndexByte(b, '\n')
		if eol < 0 {
			return false
		}
		line := bytes.TrimSuffix(b[:eol], []byte{'\r'})
		b = b[eol+1:]
		if len(line) == 0 {
			break
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 || !httpcore.IsToken(line[:i]) {
			return false // obs-fold, or not a field
		}
		name, value := line[:i], trimOWS(line[i+1:])
		r.scan.Note(name)
		switch {
		case httpcore.LowerEqualFold(name, "content-length"):
			cls++
			n, ok := parseLength(value)
			if !ok || cls > 1 && n != r.clen {
				return false
			}
			r.ambiguous = r.ambiguous || cls > 1
			r.clen = n
		case httpcore.LowerEqualFold(name, "transfer-encoding"):
			if r.chunked {
				r.ambiguous = true
			}
			// chunked must be the final coding (RFC 9112 §6.3); anything else reads to the end
			r.chunked = lastToken(value, "chunked")
			if !r.chunked {
				r.close = true
			}
		case httpcore.LowerEqualFold(name, "connection"):
			ok := true
			forEachToken(value, func(tok []byte) {
				switch {
				case httpcore.LowerEqualFold(tok, "close"):
					r.close = true
				case httpcore.LowerEqualFold(tok, "upgrade"):
					r.upgrade = true
				case r.nconn < len(r.conn):
					r.conn[r.nconn] = tok
					r.nconn++
				default:
					ok = false
				}
			})
			if !ok {
				return false
			}
		}
	}
	if r.chunked && r.clen >= 0 {
		r.ambiguous = true
		r.clen = -1 // Transfer-Encoding wins (RFC 9112 §6.3)
	}
	return true
}

// lastToken reports whether the last element of a comma-separated list is tok.
func lastToken(list []byte, tok string) bool {
	last := []byte(nil)
	forEachToken(list, func(t []byte) { last = t })
	return httpcore.LowerEqualFold(last, tok)
}

// noBody reports a response that has no body whatever its fields say (RFC 9112 §6.3).
func noBody(status int, head bool) bool {
	return head || status < 200 || status == 204 || status == 304
}

var (
	http10 = []byte("HTTP/1.0")
	http11 = []byte("HTTP/1.1")
)

// forEachToken calls f with each non-empty, trimmed element of a comma-separated list.
func forEachToken(list []byte, f func(tok []byte)) {
	for len(list) > 0 {
		var tok []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			tok, list = list[:i], list[i+1:]
		} else {
			tok, list = list, nil
		}
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			f(tok)
		}
	}
}
