package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestL4AccessLog: with logging.access the tcp listener writes a line per connection to the
// HTTP access log's file, in its format, beside the HTTP lines; SIGUSR1's reopen moves both to
// a new file; /metrics counts the connections by termination state.
func TestL4AccessLog(t *testing.T) {
	web := namedBackend(t, "w")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // answers a line, then resets
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			io.WriteString(c, "bye\n")
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	dir := t.TempDir()
	file := filepath.Join(dir, "access.log")
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0"}
  - {name: db, address: "127.0.0.1:0", protocol: tcp}
pools:
  - {name: h, backends: [{name: w, address: %q}]}
  - {name: t, backends: [{name: r, address: %q}]}
routes:
  - {listener: web, pool: h}
  - {listener: db, pool: t}
admin: {address: "127.0.0.1:0"}
logging: {access: true, access_file: %q, access_format: combined}
`, web, ln.Addr().String(), file))
	tcpOnce := func() {
		c, err := net.Dial("tcp", s.Addr("db").String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "hi\n")
		io.Copy(io.Discard, c)
	}
	httpOnce := func() {
		resp, err := client.Get("http://" + s.Addr("web").String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	read := func(f string) string { b, _ := os.ReadFile(f); return string(b) }
	tcpOnce()
	httpOnce()
	waitUntil(t, "two access-log lines", func() bool { return strings.Count(read(file), "\n") >= 2 })
	got := read(file)
	if !strings.Contains(got, `"TCP `+ln.Addr().String()+` -" - 4 `) || !strings.Contains(got, "listener=db pool=t backend=r term=SD") {
		t.Errorf("no tcp line with SD in\n%s", got)
	}
	if !strings.Contains(got, `"GET / HTTP/1.1" 200`) {
		t.Errorf("no http line in\n%s", got)
	}
	rotated := filepath.Join(dir, "access.log.1")
	if err := os.Rename(file, rotated); err != nil {
		t.Fatal(err)
	}
	s.reopenLogs()
	tcpOnce()
	waitUntil(t, "an SD line", func() bool { return strings.Contains(read(file), "term=SD") })
	if n := strings.Count(read(rotated), "\n"); n != 2 {
		t.Errorf("the rotated file got %d lines, want 2", n)
	}
	resp, err := client.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ballast_listener_terminations_total{listener="db",protocol="tcp",state="SD"} 2`) {
		t.Errorf("metrics lack the SD terminations:\n%s", grepLines(string(body), "terminations"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
