package h2proxy

import (
	"encoding/binary"
	"io"
)

// settingsFilter sits between a client connection and x/net/http2's server, which refuses a
// SETTINGS frame that carries a parameter twice (it ends the connection with PROTOCOL_ERROR),
// while RFC 9113 §6.5.3 says the values are processed in the order they appear. Processing
// them in order leaves each parameter at its last value, so the filter passes such a frame on
// with each parameter once, at its last value; a value x/net would refuse (an invalid one)
// is kept instead, so the connection still fails as it must. Every other byte passes
// unchanged: the client preface, then frame by frame, a frame header read whole and its
// payload streamed through (a SETTINGS payload, at most maxSettingsFrame bytes, is read whole).
type settingsFilter struct {
	r       io.Reader
	preface int    // bytes of the client preface still to pass
	remain  int    // payload bytes of the current frame still to pass
	pend    []byte // a frame header (or a whole rewritten SETTINGS frame) to hand out
	off     int
	err     error // to return once pend is out
	hdr     [9]byte
}

// maxSettingsFrame bounds the SETTINGS payloads the filter reads whole: x/net refuses more
// than 100 parameters anyway (600 bytes).
const maxSettingsFrame = 600

func newSettingsFilter(r io.Reader) *settingsFilter {
	return &settingsFilter{r: r, preface: len(clientPreface)}
}

// clientPreface is RFC 9113 §3.4's.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func (f *settingsFilter) Read(p []byte) (int, error) {
	for {
		switch {
		case f.off < len(f.pend):
			n := copy(p, f.pend[f.off:])
			f.off += n
			return n, nil
		case f.err != nil:
			return 0, f.err
		case f.preface > 0:
			n, err := f.r.Read(p[:min(len(p), f.preface)])
			f.preface -= n
			return n, err
		case f.remain > 0:
			n, err := f.r.Read(p[:min(len(p), f.remain)])
			f.remain -= n
			return n, err
		}
		f.next()
	}
}

// next reads the next frame header and sets what to hand out: the header, or a rewritten
// SETTINGS frame whole.
func (f *settingsFilter) next() {
	f.pend, f.off = f.hdr[:0], 0
	n, err := io.ReadFull(f.r, f.hdr[:])
	f.pend = f.hdr[:n]
	if err != nil {
		f.err = err
		return
	}
	length := int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
	const settings, ack = 0x4, 0x1
	if f.hdr[3] != settings || f.hdr[4]&ack != 0 || length == 0 || length%6 != 0 || length > maxSettingsFrame ||
		binary.BigEndian.Uint32(f.hdr[5:9])&0x7fffffff != 0 {
		f.remain = length
		return
	}
	frame := make([]byte, 9+length)
	copy(frame, f.hdr[:])
	if n, err := io.ReadFull(f.r, frame[9:]); err != nil {
		f.pend, f.err = frame[:9+n], err
		return
	}
	f.pend = dedupSettings(frame)
}

// dedupSettings returns the SETTINGS frame with each parameter once (see settingsFilter).
func dedupSettings(frame []byte) []byte {
	params := frame[9:]
	type param struct {
		id  uint16
		val uint32
	}
	var kept []param
	dup := false
	for i := 0; i+6 <= len(params); i += 6 {
		p := param{binary.BigEndian.Uint16(params[i:]), binary.BigEndian.Uint32(params[i+2:])}
		j := 0
		for j < len(kept) && kept[j].id != p.id {
			j++
		}
		switch {
		case j == len(kept):
			kept = append(kept, p)
		case validSetting(kept[j].id, kept[j].val):
			kept[j].val, dup = p.val, true
		default:
			dup = true // the invalid value stays: x/net refuses it
		}
	}
	if !dup {
		return frame
	}
	out := frame[:9]
	for _, p := range kept {
		out = binary.BigEndian.AppendUint16(out, p.id)
		out = binary.BigEndian.AppendUint32(out, p.val)
	}
	n := len(out) - 9
	out[0], out[1], out[2] = byte(n>>16), byte(n>>8), byte(n)
	return out
}

// validSetting is x/net/http2's Setting.Valid: the values RFC 9113 §6.5.2 allows.
func validSetting(id uint16, v uint32) bool {
	switch id {
	case 0x2, 0x8: // ENABLE_PUSH, ENABLE_CONNECT_PROTOCOL
		return v <= 1
	case 0x4: // INITIAL_WINDOW_SIZE
		return v <= 1<<31-1
	case 0x5: // MAX_FRAME_SIZE
		return v >= 1<<14 && v <= 1<<24-1
	}
	return true
}
