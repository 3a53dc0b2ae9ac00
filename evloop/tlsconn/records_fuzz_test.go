//go:build linux

package tlsconn

import "testing"

// FuzzRecords: however a stream of TLS records is split into reads, records counts every
// record that arrived whole and ends each read knowing where in the current record it is.
// The input's bytes choose the records' lengths (up to 16 KiB, small ones too) and the
// reads' sizes.
func FuzzRecords(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{1, 7, 100})
	f.Add([]byte{0, 0, 255}, []byte{5, 5, 5, 5})
	f.Add([]byte{64, 1}, []byte{0, 1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, lengths, splits []byte) {
		var stream []byte
		var ends []int // the stream offset where each record ends
		for i, l := range lengths {
			n := int(l) * 64 // up to 16320 bytes
			if i%3 == 2 {
				n = int(l) // small ones too
			}
			stream = append(stream, 0x17, 0x03, 0x03, byte(n>>8), byte(n))
			for range n {
				stream = append(stream, byte(i))
			}
			ends = append(ends, len(stream))
		}
		var r records
		off, s := 0, 0
		for off < len(stream) {
			k := len(stream) - off
			if s < len(splits) {
				k = min(k, int(splits[s])+1)
				s++
			}
			r.see(stream[off : off+k])
			off += k
			whole := 0
			for _, e := range ends {
				if e <= off {
					whole++
				}
			}
			if r.ends != whole {
				t.Fatalf("after %d of %d bytes: %d records counted whole, want %d", off, len(stream), r.ends, whole)
			}
		}
		if r.hn != 0 || r.left != 0 {
			t.Fatalf("the stream ended on a record boundary but records is at header byte %d, %d body bytes to come", r.hn, r.left)
		}
	})
}
