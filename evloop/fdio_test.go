//go:build linux

package evloop

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestFDPipe: Read and Write work on a descriptor that is not a socket (a pipe), where
// recvfrom and sendto fail with ENOTSOCK, and report the end of the stream after the writer
// closes.
func TestFDPipe(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := FD{Fd: p[0]}, FD{Fd: p[1]}
	defer syscall.Close(p[0])
	if n, err := w.Write([]byte("through a pipe")); n != 14 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "through a pipe" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	if _, err := r.Read(buf); err != ErrAgain {
		t.Fatalf("Read of an empty pipe: %v, want ErrAgain", err)
	}
	_ = syscall.Close(p[1])
	if _, err := r.Read(buf); err != io.EOF {
		t.Fatalf("Read after the writer closed: %v, want io.EOF", err)
	}
}

// TestFDWriteClosedPeer: a write to a socket whose peer is gone fails with EPIPE or
// ECONNRESET and raises no SIGPIPE (sendto's MSG_NOSIGNAL). A signal the kernel raises in a
// call is delivered before the call returns, so a SIGPIPE would reach the channel before the
// SIGWINCH sent after the write (two pending signals are handed over in the order of their
// numbers: 13 before 28).
func TestFDWriteClosedPeer(t *testing.T) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGPIPE, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sp[0])
	_ = syscall.Close(sp[1])
	f := FD{Fd: sp[0]}
	_, err = f.Write([]byte("nobody reads this"))
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write to a closed peer: %v, want EPIPE or ECONNRESET", err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	for sig := range sigs {
		if sig == syscall.SIGPIPE {
			t.Fatal("the write raised SIGPIPE")
		}
		if sig == syscall.SIGWINCH {
			break
		}
	}
	if _, err := f.Read(make([]byte, 8)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read from a closed peer: %v, want io.EOF", err)
	}
}
