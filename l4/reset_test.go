package l4

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/accesslog"
	"ballast/config"
)

// resetter answers a line with size bytes, then resets the connection (SO_LINGER 0).
func resetter(size int) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			return
		}
		_, _ = c.Write(make([]byte, size))
		_ = c.SetLinger(0)
		_ = c.Close()
	}
}

// readToEnd reads c until it ends and returns how it ended: nil for an orderly end (FIN).
func readToEnd(c net.Conn) error {
	_, err := io.Copy(io.Discard, c)
	return err
}

// TestTCPBackendResetReachesClient: a backend that resets mid-stream reaches the client as a
// reset (ECONNRESET, not a clean end of stream), whether the relay forwards the connection
// (a short answer) or Pipe does (a bulk one), and is counted as SD.
func TestTCPBackendResetReachesClient(t *testing.T) {
	for _, size := range []int{100, 4 << 20} {
		be := tcpServer(t, resetter(size))
		p, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, be)})
		c := dialTCP(t, addr)
		io.WriteString(c, "go\n")
		if err := readToEnd(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%d bytes then a backend reset: the client saw %v, want a reset", size, err)
		}
		eventually(t, 5*time.Second, "SD counted", func() bool { return p.Stats().Terminations["SD"] == 1 })
	}
}

// TestTCPClientResetReachesBackend: a client that resets reaches the backend as a reset, and
// is counted as CD; an orderly exchange is "--".
func TestTCPClientResetReachesBackend(t *testing.T) {
	seen := make(chan error, 2)
	be := tcpServer(t, func(c *net.TCPConn) {
		r := bufio.NewReader(c)
		if _, err := r.ReadString('\n'); err != nil {
			seen <- err
			return
		}
		io.WriteString(c, "ok\n")
		_, err := io.Copy(io.Discard, r)
		seen <- err
	})
	p, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "p", "leastconn", 0, 0, be)})
	for _, reset := range []bool{true, false} {
		c := dialTCP(t, addr)
		io.WriteString(c, "hi\n")
		if got := readLine(t, c); got != "ok" {
			t.Fatalf("answer %q", got)
		}
		if reset {
			c.SetLinger(0)
			c.Close()
		} else {
			c.CloseWrite()
		}
		select {
		case err := <-seen:
			if reset != errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("client reset %v: the backend saw %v", reset, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the backend saw no end")
		}
		if !reset {
			readToEnd(c)
		}
	}
	eventually(t, 5*time.Second, "CD and -- counted", func() bool {
		st := p.Stats().Terminations
		return st["CD"] == 1 && st["--"] == 1
	})
}

// TestTCPAccessLog: with logging.access a line per connection, in the HTTP access log's file
// and format: client and port, backend and its address, bytes each way, duration and the
// termination state (SD for a backend reset, cD for the idle timeout, SC when every backend
// refused).
func TestTCPAccessLog(t *testing.T) {
	be := tcpServer(t, resetter(100))
	quiet := tcpServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	file := filepath.Join(t.TempDir(), "access.log")
	var sw accesslog.Switch
	if err := sw.Set(config.Logging{Access: true, AccessLog: config.AccessLog{AccessFile: file}}); err != nil {
		t.Fatal(err)
	}
	defer sw.Set(config.Logging{})
	start := func(name, backend string) string {
		p, addr := startTCP(t, TCPOptions{Name: name, IdleTimeout: 200 * time.Millisecond},
			Route{Pool: newPool(t, name, "leastconn", 0, 0, backend)})
		p.SetAccessLog(&sw)
		return addr
	}
	db, idle, dead := start("db", be), start("idle", quiet), start("dead", deadPort(t))
	c := dialTCP(t, db)
	io.WriteString(c, "go\n")
	readToEnd(c)
	ci := dialTCP(t, idle)
	io.WriteString(ci, "x")
	readToEnd(ci)
	readToEnd(dialTCP(t, dead))

	lines := func() map[string]map[string]any {
		b, _ := os.ReadFile(file)
		out := map[string]map[string]any{}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			m := map[string]any{}
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			out[m["listener"].(string)] = m
		}
		return out
	}
	eventually(t, 5*time.Second, "three lines", func() bool { return len(lines()) == 3 })
	ls := lines()
	l := ls["db"]
	want := map[string]any{"transport": "tcp", "client": "127.0.0.1", "client_port": float64(c.LocalAddr().(*net.TCPAddr).Port),
		"pool": "db", "backend": be, "backend_address": be, "bytes_in": float64(3), "bytes_out": float64(100), "termination": "SD"}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, l[k], v, l)
		}
	}
	if _, ok := l["method"]; ok {
		t.Errorf("a connection's line has HTTP fields: %v", l)
	}
	if d := l["duration_ms"].(float64); d <= 0 || d > 5000 {
		t.Errorf("duration_ms %v", d)
	}
	if got := ls["idle"]["termination"]; got != "cD" {
		t.Errorf("idle connection: termination %v", got)
	}
	if got := ls["dead"]["termination"]; got != "SC" || ls["dead"]["backend"] != "" {
		t.Errorf("refused connection: %v", ls["dead"])
	}
}
