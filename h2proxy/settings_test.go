//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

package h2proxy

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"

	"golang.org/x/net/http2"
)

// frames writes the client preface and then what write writes with a Framer.
func frames(t testing.TB, write func(*http2.Framer)) []byte {
	var b bytes.Buffer
	b.WriteString(clientPreface)
	write(http2.NewFramer(&b, nil))
	return b.Bytes()
}

// TestSettingsFilter: a SETTINGS frame that repeats a parameter reaches x/net with each
// parameter once at its last value (h2spec 6.5.3), one that repeats an invalid value keeps it
// (x/net ends the connection as it must), and every other frame passes byte for byte, however
// the bytes arrive.
func TestSettingsFilter(t *testing.T) {
	iws := http2.SettingInitialWindowSize
	for _, tc := range []struct {
		name string
		in   []http2.Setting
		want []http2.Setting
	}{
		{"repeated window", []http2.Setting{{ID: iws, Val: 100}, {ID: iws, Val: 1}}, []http2.Setting{{ID: iws, Val: 1}}},
		{"no repeat", []http2.Setting{{ID: iws, Val: 100}, {ID: http2.SettingMaxFrameSize, Val: 1 << 15}}, []http2.Setting{{ID: iws, Val: 100}, {ID: http2.SettingMaxFrameSize, Val: 1 << 15}}},
		{"invalid first", []http2.Setting{{ID: iws, Val: 1 << 31}, {ID: iws, Val: 1}}, []http2.Setting{{ID: iws, Val: 1 << 31}}},
		{"invalid last", []http2.Setting{{ID: http2.SettingEnablePush, Val: 0}, {ID: http2.SettingEnablePush, Val: 2}}, []http2.Setting{{ID: http2.SettingEnablePush, Val: 2}}},
		{"three of two", []http2.Setting{{ID: iws, Val: 5}, {ID: http2.SettingHeaderTableSize, Val: 0}, {ID: iws, Val: 7}, {ID: http2.SettingHeaderTableSize, Val: 4096}},
			[]http2.Setting{{ID: iws, Val: 7}, {ID: http2.SettingHeaderTableSize, Val: 4096}}},
	} {
		stream := func(ss []http2.Setting) []byte {
			return frames(t, func(fr *http2.Framer) {
				_ = fr.WriteData(1, false, []byte("before"))
				_ = fr.WriteSettings(ss...)
				_ = fr.WriteSettingsAck()
				_ = fr.WriteData(3, true, bytes.Repeat([]byte("x"), 20000))
			})
		}
		in, want := stream(tc.in), stream(tc.want)
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			out, err := io.ReadAll(newSettingsFilter(r))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("%s (one byte at a time: %v): the filter gave\n%x\nwant\n%x", tc.name, oneByte, out, want)
			}
		}
	}
}

// FuzzSettingsFilter: whatever the bytes, the filter hands on exactly what it read except for
// a SETTINGS frame's repeated parameters, so a stream without such a frame passes unchanged,
// and the output never has more bytes than the input.
func FuzzSettingsFilter(f *testing.F) {
	f.Add(frames(f, func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: 4, Val: 1}, http2.Setting{ID: 4, Val: 2})
	}), uint8(1))
	f.Add(frames(f, func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{1}) }), uint8(3))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		r := &chunks{data: in, n: int(chunk%16) + 1}
		out, err := io.ReadAll(newSettingsFilter(r))
		if err != nil && err != io.ErrUnexpectedEOF {
			t.Fatalf("error %v", err)
		}
		if len(out) > len(in) {
			t.Fatalf("%d bytes out of %d in", len(out), len(in))
		}
		if !bytes.Contains(in, []byte{0x4}) && !bytes.Equal(out, in) {
			t.Fatalf("without a SETTINGS frame the bytes changed: %q -> %q", in, out)
		}
	})
}

type chunks struct {
	data []byte
	n    int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}
