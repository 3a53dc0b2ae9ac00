package httpproxy

import (
	"io"
	"net"
	"testing"
)

// TestSharedBackendBuffers pins what sharing the buffered readers and writers across backends
// relies on: a reader or writer taken for one connection never carries bytes of the
// connection it served before (what a backend sent beyond a response, or what was not
// flushed), whichever buffer the pool hands back.
func TestSharedBackendBuffers(t *testing.T) {
	pipe := func() (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		return a, b
	}
	// Reader: backend A sends more than is read; the leftover must not reach B's reader.
	aNear, aFar := pipe()
	go func() { _, _ = aFar.Write([]byte("HTTP/1.1 200 OK\r\n\r\nLEFTOVER-FROM-A")) }()
	br := acquireReader(aNear)
	if _, err := br.Peek(len("HTTP/1.1 200 OK\r\n\r\nLEFTOVER-FROM-A")); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Discard(len("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	releaseReader(br)
	bNear, bFar := pipe()
	go func() { _, _ = bFar.Write([]byte("from-B")); _ = bFar.Close() }()
	for range 4 { // the pool may hand back the same reader or another: check several
		br = acquireReader(bNear)
		if br.Buffered() != 0 {
			t.Fatalf("a fresh reader has %d bytes buffered", br.Buffered())
		}
		releaseReader(br)
	}
	br = acquireReader(bNear)
	got, err := io.ReadAll(br)
	releaseReader(br)
	if err != nil || string(got) != "from-B" {
		t.Fatalf("reader for B read %q, %v; want only B's bytes", got, err)
	}

	// Writer: bytes written for A but not flushed must never be sent to B.
	cNear, _ := pipe()
	bw := acquireWriter(cNear)
	_, _ = bw.WriteString("UNFLUSHED-FOR-C")
	releaseWriter(bw)
	dNear, dFar := pipe()
	bw = acquireWriter(dNear)
	if bw.Buffered() != 0 {
		t.Fatalf("a fresh writer has %d bytes buffered", bw.Buffered())
	}
	_, _ = bw.WriteString("for-D")
	done := make(chan []byte)
	go func() {
		buf := make([]byte, 64)
		n, _ := dFar.Read(buf)
		done <- buf[:n]
	}()
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	releaseWriter(bw)
	if got := <-done; string(got) != "for-D" {
		t.Fatalf("D received %q, want only %q", got, "for-D")
	}
	if bw.Size() != backendBufferSize || br.Size() != backendBufferSize {
		t.Errorf("buffer sizes %d and %d, want %d", bw.Size(), br.Size(), backendBufferSize)
	}
}
