package httpproxy

import (
	"strings"
	"testing"

	"ballast/httpcore"
)

func TestScanFieldLines(t *testing.T) {
	tests := []struct {
		raw   string
		found uint8
		ok    bool
	}{
		{"Host: x\r\nContent-Length: 5\r\n\r\n", fieldHost | fieldContentLength, true},
		{"host: x\r\ncontent-length:5\r\n", fieldHost | fieldContentLength, true},
		{"X-Host: x\r\nX-Content-Length: 5\r\n", 0, true},
		{"Transfer-Encoding: chunked\r\nContent-Length: 1\r\n", fieldTransferEncoding | fieldContentLength, true},
		{"", 0, true},
		{"X Forwarded For: 1\r\n", 0, false},
		{"Transfer-Encoding : chunked\r\n", 0, false},
		{"X-A: 1\r\n 2\r\n", 0, false},
		{": 1\r\n", 0, false},
		{"X@Y: 1\r\n", 0, false},
		{"X-A 1\r\n", 0, false},
	}
	for _, tc := range tests {
		if found, ok := scanFieldLines([]byte(tc.raw)); found != tc.found || ok != tc.ok {
			t.Errorf("scanFieldLines(%q) = %b, %v; want %b, %v", tc.raw, found, ok, tc.found, tc.ok)
		}
	}
}

func FuzzScanFieldLines(f *testing.F) {
	f.Add([]byte("Host: x\r\nContent-Length: 5\r\n\r\n"))
	f.Add([]byte("X A: 1\r\n\tb\r\nTransfer-Encoding: chunked\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		found, ok := scanFieldLines(raw)
		var want uint8
		wantOK := true
		for _, line := range strings.Split(string(raw), "\n") {
			if line == "" || line[0] == '\r' {
				break
			}
			name, _, colon := strings.Cut(line, ":")
			if !colon || !httpcore.IsToken([]byte(name)) {
				wantOK = false
				break
			}
			switch strings.ToLower(name) {
			case "content-length":
				want |= fieldContentLength
			case "transfer-encoding":
				want |= fieldTransferEncoding
			case "host":
				want |= fieldHost
			}
		}
		if ok != wantOK || ok && found != want {
			t.Fatalf("scanFieldLines(%q) = %b, %v; want %b, %v", raw, found, ok, want, wantOK)
		}
	})
}
