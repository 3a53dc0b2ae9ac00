package h2mux

import (
	"encoding/binary"
	"strconv"
)

// ErrCode is an HTTP/2 error code (RFC 9113 §7).
type ErrCode uint32

// The error codes of RFC 9113 §7.
const (
	ErrCodeNo                 ErrCode = 0x0
	ErrCodeProtocol           ErrCode = 0x1
	ErrCodeInternal           ErrCode = 0x2
	ErrCodeFlowControl        ErrCode = 0x3
	ErrCodeSettingsTimeout    ErrCode = 0x4
	ErrCodeStreamClosed       ErrCode = 0x5
	ErrCodeFrameSize          ErrCode = 0x6
	ErrCodeRefusedStream      ErrCode = 0x7
	ErrCodeCancel             ErrCode = 0x8
	ErrCodeCompression        ErrCode = 0x9
	ErrCodeConnect            ErrCode = 0xa
	ErrCodeEnhanceYourCalm    ErrCode = 0xb
	ErrCodeInadequateSecurity ErrCode = 0xc
	ErrCodeHTTP11Required     ErrCode = 0xd
)

var errCodeNames = [...]string{
	"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
	"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
	"CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
}

func (e ErrCode) String() string {
	if int(e) < len(errCodeNames) {
		return errCodeNames[e]
	}
	return "unknown error code 0x" + strconv.FormatUint(uint64(e), 16)
}

// Frame types (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
)

// Frame flags.
const (
	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// SETTINGS parameters (RFC 9113 §6.5.2).
const (
	settingHeaderTableSize      = 0x1
	settingEnablePush           = 0x2
	settingMaxConcurrentStreams = 0x3
	settingInitialWindowSize    = 0x4
	settingMaxFrameSize         = 0x5
	settingMaxHeaderListSize    = 0x6
)

const (
	frameHeaderLen = 9
	maxWindow      = 1<<31 - 1
	initialWindow  = 65535 // the protocol's initial window, for streams and the connection
	maxFrameLimit  = 1<<24 - 1
)

// clientPreface is what every HTTP/2 client sends first (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameHeader is the fixed 9-byte header of a frame.
type frameHeader struct {
	length   uint32
	typ      uint8
	flags    uint8
	streamID uint32
}

func parseFrameHeader(b []byte) frameHeader {
	return frameHeader{
		length:   uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		typ:      b[3],
		flags:    b[4],
		streamID: binary.BigEndian.Uint32(b[5:9]) & maxWindow,
	}
}

// appendFrameHeader appends a frame header to b.
func appendFrameHeader(b []byte, length int, typ, flags uint8, streamID uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(streamID>>24), byte(streamID>>16), byte(streamID>>8), byte(streamID))
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// frameError is what parsing one frame found wrong with it: a connection error unless stream
// is set, a stream error (RFC 9113 §5.4) otherwise.
type frameError struct {
	code   ErrCode
	stream bool
	reason string
}

// frame is one frame's decoded fields: parseFrame fills what its type defines. data is the
// payload without padding (DATA) or the header block fragment (HEADERS, CONTINUATION,
// PUSH_PROMISE), and aliases the input.
type frame struct {
	frameHeader
	data      []byte
	padLen    int    // padding bytes, including the Pad Length octet (DATA, HEADERS)
	streamDep uint32 // PRIORITY and HEADERS with the PRIORITY flag
	exclusive bool
	weight    uint8
	hasPrio   bool
	code      ErrCode // RST_STREAM, GOAWAY
	lastID    uint32  // GOAWAY
	increment uint32  // WINDOW_UPDATE
	ping      [8]byte
	promiseID uint32 // PUSH_PROMISE
}

// parseFrame checks one whole frame against the rules of its type that need no connection
// state (RFC 9113 §6: lengths, stream 0 or not, padding, increments) and decodes its fields.
// The rules that depend on state (stream states, CONTINUATION order, flow control, settings
// values) are the Conn's. FuzzFrames holds it to x/net's Framer.
func parseFrame(h frameHeader, p []byte) (f frame, ferr *frameError) {
	f.frameHeader = h
	switch h.typ {
	case frameData:
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "DATA frame on stream 0")
		}
		f.data = p
		if h.flags&flagPadded != 0 {
			if len(p) < 1 {
				return f, connErr(ErrCodeFrameSize, "padded DATA frame without pad length")
			}
			pad := int(p[0])
			if pad > len(p)-1 {
				return f, connErr(ErrCodeProtocol, "DATA padding longer than the payload")
			}
			f.data = p[1 : len(p)-pad]
			f.padLen = pad + 1
		}
	case frameHeaders:
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "HEADERS frame on stream 0")
		}
		pad := 0
		if h.flags&flagPadded != 0 {
			if len(p) < 1 {
				return f, connErr(ErrCodeFrameSize, "padded HEADERS frame without pad length")
			}
			pad = int(p[0])
			p = p[1:]
			f.padLen = pad + 1
		}
		if h.flags&flagPriority != 0 {
			if len(p) < 5 {
				return f, connErr(ErrCodeFrameSize, "HEADERS frame too short for its priority")
			}
			v := binary.BigEndian.Uint32(p)
			f.streamDep, f.exclusive, f.weight, f.hasPrio = v&maxWindow, v&(1<<31) != 0, p[4], true
			p = p[5:]
		}
		if pad > len(p) {
			return f, connErr(ErrCodeProtocol, "HEADERS padding longer than the payload")
		}
		f.data = p[:len(p)-pad]
	case framePriority:
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "PRIORITY frame on stream 0")
		}
		if len(p) != 5 {
			return f, streamErr(ErrCodeFrameSize, "PRIORITY frame of a length other than 5")
		}
		v := binary.BigEndian.Uint32(p)
		f.streamDep, f.exclusive, f.weight, f.hasPrio = v&maxWindow, v&(1<<31) != 0, p[4], true
	case frameRSTStream:
		if len(p) != 4 {
			return f, connErr(ErrCodeFrameSize, "RST_STREAM frame of a length other than 4")
		}
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "RST_STREAM frame on stream 0")
		}
		f.code = ErrCode(binary.BigEndian.Uint32(p))
	case frameSettings:
		if h.flags&flagAck != 0 && len(p) > 0 {
			return f, connErr(ErrCodeFrameSize, "SETTINGS acknowledgement with a payload")
		}
		if h.streamID != 0 {
			return f, connErr(ErrCodeProtocol, "SETTINGS frame on a stream")
		}
		if len(p)%6 != 0 {
			return f, connErr(ErrCodeFrameSize, "SETTINGS frame length not a multiple of 6")
		}
		for q := p; len(q) >= 6; q = q[6:] {
			v := binary.BigEndian.Uint32(q[2:])
			switch uint16(q[0])<<8 | uint16(q[1]) {
			case settingEnablePush:
				if v > 1 {
					return f, connErr(ErrCodeProtocol, "SETTINGS_ENABLE_PUSH neither 0 nor 1")
				}
			case settingInitialWindowSize:
				if v > maxWindow {
					return f, connErr(ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
				}
			case settingMaxFrameSize:
				if v < DefaultMaxFrameSize || v > maxFrameLimit {
					return f, connErr(ErrCodeProtocol, "SETTINGS_MAX_FRAME_SIZE out of range")
				}
			}
		}
		f.data = p
	case framePushPromise:
		// A client never sends one (RFC 9113 §8.4); the Conn refuses any that parses.
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "PUSH_PROMISE frame on stream 0")
		}
		pad := 0
		if h.flags&flagPadded != 0 {
			if len(p) < 1 {
				return f, connErr(ErrCodeFrameSize, "padded PUSH_PROMISE frame without pad length")
			}
			pad = int(p[0])
			p = p[1:]
		}
		if len(p) < 4 {
			return f, connErr(ErrCodeFrameSize, "PUSH_PROMISE frame too short")
		}
		f.promiseID = binary.BigEndian.Uint32(p) & maxWindow
		p = p[4:]
		if pad > len(p) {
			return f, connErr(ErrCodeProtocol, "PUSH_PROMISE padding longer than the payload")
		}
		f.data = p[:len(p)-pad]
	case framePing:
		if len(p) != 8 {
			return f, connErr(ErrCodeFrameSize, "PING frame of a length other than 8")
		}
		if h.streamID != 0 {
			return f, connErr(ErrCodeProtocol, "PING frame on a stream")
		}
		copy(f.ping[:], p)
	case frameGoAway:
		if h.streamID != 0 {
			return f, connErr(ErrCodeProtocol, "GOAWAY frame on a stream")
		}
		if len(p) < 8 {
			return f, connErr(ErrCodeFrameSize, "GOAWAY frame shorter than 8")
		}
		f.lastID = binary.BigEndian.Uint32(p) & maxWindow
		f.code = ErrCode(binary.BigEndian.Uint32(p[4:]))
		f.data = p[8:]
	case frameWindowUpdate:
		if len(p) != 4 {
			return f, connErr(ErrCodeFrameSize, "WINDOW_UPDATE frame of a length other than 4")
		}
		f.increment = binary.BigEndian.Uint32(p) & maxWindow
		if f.increment == 0 {
			if h.streamID == 0 {
				return f, connErr(ErrCodeProtocol, "WINDOW_UPDATE of 0 on the connection")
			}
			return f, streamErr(ErrCodeProtocol, "WINDOW_UPDATE of 0")
		}
	case frameContinuation:
		if h.streamID == 0 {
			return f, connErr(ErrCodeProtocol, "CONTINUATION frame on stream 0")
		}
		f.data = p
	default:
		// Unknown types are ignored (RFC 9113 §5.5).
		f.data = p
	}
	return f, nil
}

func connErr(code ErrCode, reason string) *frameError {
	return &frameError{code: code, reason: reason}
}

func streamErr(code ErrCode, reason string) *frameError {
	return &frameError{code: code, stream: true, reason: reason}
}
