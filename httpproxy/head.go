package httpproxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"ballast/httpcore"
)

// headVerdict is what checkHead decided about a request head.
type headVerdict uint8

const (
	headOK          headVerdict = iota
	headBadName                 // a field name that is not a token, or an obs-fold line
	headBadTarget               // a request target that is not origin-, absolute- or asterisk-form
	headConnect                 // CONNECT, which no route can tunnel
	headBothLengths             // Content-Length and Transfer-Encoding together
	headBadVersion              // a version other than HTTP/1.0 and HTTP/1.1
	headUpgradeBody             // a protocol switch with a request body
	headBadHost                 // Host missing from HTTP/1.1, empty or not a host[:port]
)

// message is the client's answer to a refused head.
func (v headVerdict) message() string {
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
	}
	return ""
}

// checkHead validates what fasthttp parsed but accepts too liberally: the method and field
// names (it takes "X Forwarded For" as a name and forwards it), the form and bytes of the
// request target, the version (it takes any HTTP/d.d), CONNECT, and Transfer-Encoding
// beside Content-Length or other than chunked. For an absolute-form target it also returns
// the authority, which replaces Host (RFC 9112 §3.2.2). It reads bytes fasthttp already
// holds and allocates nothing.
func checkHead(h *fasthttp.RequestHeader) (authority []byte, v headVerdict) {
	if p := h.Protocol(); !bytes.Equal(p, http11) && !bytes.Equal(p, http10) {
		return nil, headBadVersion
	}
	if h.IsConnect() {
		return nil, headConnect
	}
	fields, ok := scanFieldLines(h.RawHeaders())
	switch {
	case !ok || !httpcore.IsToken(h.Method()):
		return nil, headBadName
	case fields&fieldTransferEncoding != 0 && (fields&fieldContentLength != 0 || h.ContentLength() != -1):
		// fasthttp lets Transfer-Encoding win over Content-Length, and takes "identity" as
		// no coding at all; either is a smuggling attempt or a broken client (RFC 9112 §6.1).
		return nil, headBothLengths
	}
	target := h.RequestURI()
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return nil, headBadTarget // RFC 3986: anything else must be percent-encoded
		}
	}
	switch {
	case len(target) > 0 && target[0] == '/':
	case len(target) == 1 && target[0] == '*':
		if !h.IsOptions() {
			return nil, headBadTarget
		}
	default:
		authority, ok = httpcore.AbsoluteAuthority(target)
		if !ok {
			return nil, headBadTarget
		}
		return authority, headOK // the authority replaces Host, whatever Host says
	}
	// RFC 9112 §3.2: an HTTP/1.1 request without Host, or with more than one (fasthttp
	// refuses those), gets 400; RFC 9110 §4.2.1: an http URI has a non-empty host.
	if fields&fieldHost == 0 {
		if h.IsHTTP11() {
			return nil, headBadHost
		}
	} else if !httpcore.ValidAuthority(h.Host()) {
		return nil, headBadHost
	}
	return nil, headOK
}

// Bits of what scanFieldLines found.
const (
	fieldContentLength uint8 = 1 << iota
	fieldTransferEncoding
	fieldHost
)

// scanFieldLines checks a raw header block (fasthttp's RawHeaders: the exact wire bytes after
// the request line) in one pass: every line must be an RFC 9110 token, a colon and a value.
// A line starting with a space or tab is obs-fold, which RFC 9112 §5.2 lets a server refuse
// and which is refused here, so that no two parsers can disagree on where a field ends. It
// also reports which framing fields are present.
func scanFieldLines(raw []byte) (found uint8, ok bool) {
	for len(raw) > 0 {
		if c := raw[0]; c == '\r' || c == '\n' {
			return found, true // the blank line that ends the block
		}
		i := 0
		for i < len(raw) && httpcore.IsTChar(raw[i]) {
			i++
		}
		if i == 0 || i == len(raw) || raw[i] != ':' {
			return found, false
		}
		switch {
		case i == len("content-length") && httpcore.LowerEqualFold(raw[:i], "content-length"):
			found |= fieldContentLength
		case i == len("transfer-encoding") && httpcore.LowerEqualFold(raw[:i], "transfer-encoding"):
			found |= fieldTransferEncoding
		case i == len("host") && httpcore.LowerEqualFold(raw[:i], "host"):
			found |= fieldHost
		}
		j := bytes.IndexByte(raw[i:], '\n')
		if j < 0 {
			break
		}
		raw = raw[i+j+1:]
	}
	return found, true
}
