// Package peertest runs the real peers of end-to-end tests (nginx, unbound, ...) on loopback
// ports, connects loopback socket pairs, and speaks the little DNS those tests need. It is
// used by tests only.
//
// Start finds a free port, runs the peer, waits until it serves and kills it when the test
// ends; every wait is bounded. Functions are called from the test's goroutine.
package peertest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Binary returns the path of a Debian-installed peer, or skips the test naming the package.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/sbin/" + name; fileExists(p) {
		return p
	}
	t.Skipf("%s is not installed (Debian package %s); skipping the real-peer test", name, pkg)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// FreePort returns a loopback port that was free a moment ago, for a peer that binds itself.
// A udp port is one whose tcp twin is free too: DNS servers bind both.
func FreePort(t testing.TB, network string) int {
	t.Helper()
	if network == "udp" {
		for try := 0; ; try++ {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := c.LocalAddr().(*net.UDPAddr).Port
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			c.Close()
			if err == nil {
				ln.Close()
				return port
			}
			if try == 50 {
				t.Fatalf("no loopback port free for both udp and tcp: %v", err)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Dir is a temporary directory a peer running as another user can read.
func Dir(t testing.TB) string {
	d := t.TempDir()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// Start runs a peer process on a free loopback port and returns the port once ready says it
// serves. A port is only known free until the peer binds it, and other processes on the
// machine take ports too, so a peer that exits (e.g. "address already in use") is started
// again on another port, a few times. The process is killed when the test ends.
func Start(t testing.TB, network, name string, args func(port int) []string, ready func(port int) bool) int {
	t.Helper()
	for try := 0; try < 10; try++ {
		port := FreePort(t, network)
		cmd := exec.Command(name, args(port)...)
		out, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				b, _ := os.ReadFile(out.Name())
				t.Logf("%s (port %d) output:\n%s", name, port, b)
			}
			out.Close()
		})
		if waitReady(port, exited, ready) {
			return port
		}
		select {
		case <-exited:
			t.Logf("%s exited on port %d; trying another port", name, port)
		default:
			t.Fatalf("%s on port %d not ready after 15s", name, port)
		}
	}
	t.Fatalf("%s did not start in 10 tries", name)
	return 0
}

func waitReady(port int, exited <-chan struct{}, ready func(int) bool) bool {
	for end := time.Now().Add(15 * time.Second); !ready(port); {
		select {
		case <-exited:
			return false
		default:
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Unbound starts an unbound (bin) on a loopback port whose local zone answers
// www.ballast.test with answer, and returns its address once it answers.
func Unbound(t testing.TB, bin, answer string) string {
	t.Helper()
	dir := Dir(t)
	cf := filepath.Join(dir, "unbound.conf")
	buf := make([]byte, 512)
	port := Start(t, "udp", bin, func(port int) []string {
		conf := fmt.Sprintf(`server:
    interface: 127.0.0.1@%[2]d
    port: %[2]d
    so-reuseport: no
    do-daemonize: no
    do-ip6: no
    access-control: 127.0.0.0/8 allow
    chroot: ""
    username: ""
    directory: "%[1]s"
    pidfile: "%[1]s/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    module-config: "iterator"
    local-zone: "ballast.test." static
    local-data: "www.ballast.test. 60 IN A %[3]s"
remote-control:
    control-enable: no
`, dir, port, answer)
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-d", "-c", cf}
	}, func(port int) bool {
		ra := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		c, err := net.DialUDP("udp", nil, ra)
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = c.Write(DNSQuery(1, "www.ballast.test"))
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := c.Read(buf)
		if err != nil {
			return false
		}
		_, a, err := DNSAnswerA(buf[:n])
		return err == nil && a.String() == answer
	})
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// DNSQuery encodes a standard query for an A record.
func DNSQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, l := range splitLabels(name) {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
}

func splitLabels(name string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '.' {
			if i > start {
				out = append(out, name[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// DNSAnswerA decodes a response to DNSQuery: its ID and the first A record.
func DNSAnswerA(b []byte) (uint16, netip.Addr, error) {
	if len(b) < 12 {
		return 0, netip.Addr{}, errors.New("short response")
	}
	id := binary.BigEndian.Uint16(b)
	if b[2]&0x80 == 0 || b[3]&0x0F != 0 {
		return id, netip.Addr{}, fmt.Errorf("not a successful response: flags %x", b[2:4])
	}
	qd, an := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:])
	p := 12
	skipName := func() error {
		for p < len(b) {
			l := int(b[p])
			switch {
			case l == 0:
				p++
				return nil
			case l&0xC0 == 0xC0:
				p += 2
				return nil
			}
			p += 1 + l
		}
		return errors.New("name runs off the end")
	}
	for range qd {
		if err := skipName(); err != nil {
			return id, netip.Addr{}, err
		}
		p += 4
	}
	for range an {
		if err := skipName(); err != nil || p+10 > len(b) {
			return id, netip.Addr{}, errors.New("truncated answer")
		}
		typ, rdlen := binary.BigEndian.Uint16(b[p:]), int(binary.BigEndian.Uint16(b[p+8:]))
		p += 10
		if p+rdlen > len(b) {
			return id, netip.Addr{}, errors.New("truncated rdata")
		}
		if typ == 1 && rdlen == 4 {
			return id, netip.AddrFrom4([4]byte(b[p : p+4])), nil
		}
		p += rdlen
	}
	return id, netip.Addr{}, errors.New("no A record")
}

// NginxProxyProtocol starts nginx (bin) on a loopback port with `listen ... proxy_protocol`: it
// answers every request with the PROXY header's client address and port, and logs each as
// "client=ADDR:PORT peer=REMOTE" in the returned access log. It returns nginx's address.
func NginxProxyProtocol(t testing.TB, bin string) (addr, accessLog string) {
	t.Helper()
	dir := Dir(t)
	conf := filepath.Join(dir, "nginx.conf")
	port := Start(t, "tcp", bin, func(port int) []string {
		body := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    log_format pp 'client=$proxy_protocol_addr:$proxy_protocol_port peer=$remote_addr';
    server {
        listen 127.0.0.1:%[2]d proxy_protocol;
        access_log %[1]s/access.log pp;
        location / { return 200 "$proxy_protocol_addr:$proxy_protocol_port\n"; }
    }
}
`, dir, port)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	}, func(port int) bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return fmt.Sprintf("127.0.0.1:%d", port), filepath.Join(dir, "access.log")
}

// TCPPair returns two connected TCP connections on 127.0.0.1, both closed when the test ends.
func TCPPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}
