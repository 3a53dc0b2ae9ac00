package l4

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/proxyproto"
)

// freePort returns a loopback port that was free a moment ago, for a peer that binds itself.
func freePort(t testing.TB, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// peerDir is a temporary directory a peer running as another user can read.
func peerDir(t testing.TB) string {
	d := t.TempDir()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// startPeer runs a peer process on a free loopback port and returns the port once ready says
// it serves. A port is only known free until the peer binds it, and other processes on the
// machine take ports too, so a peer that exits (e.g. "address already in use") is started
// again on another port, a few times. The process is killed when the test ends.
func startPeer(t testing.TB, network, name string, args func(port int) []string, ready func(port int) bool) int {
	t.Helper()
	for try := 0; try < 5; try++ {
		port := freePort(t, network)
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
			cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-exited
			if t.Failed() {
				b, _ := os.ReadFile(out.Name())
				t.Logf("%s (port %d) output:\n%s", name, port, b)
			}
			out.Close()
		})
		end := time.Now().Add(15 * time.Second)
		for !ready(port) {
			select {
			case <-exited:
				t.Logf("%s exited on port %d; trying another port", name, port)
				goto next
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("%s on port %d not ready after 15s", name, port)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return port
	next:
	}
	t.Fatalf("%s did not start in 5 tries", name)
	return 0
}

// TestNginxProxyProtocol: nginx with `listen ... proxy_protocol` behind the TCP proxy logs the
// original client's address and port, for send_proxy v1 and v2.
func TestNginxProxyProtocol(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/nginx"); err2 != nil {
			t.Skip("nginx is not installed (Debian package nginx); skipping the real-consumer test")
		}
		nginx = "/usr/sbin/nginx"
	}
	for _, v := range []proxyproto.Version{proxyproto.V1, proxyproto.V2} {
		t.Run(v.String(), func(t *testing.T) {
			dir := peerDir(t)
			conf := filepath.Join(dir, "nginx.conf")
			port := startPeer(t, "tcp", nginx, func(port int) []string {
				if err := os.WriteFile(conf, []byte(nginxConf(dir, port)), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf}
			}, func(port int) bool {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err == nil {
					c.Close()
				}
				return err == nil
			})
			be := fmt.Sprintf("127.0.0.1:%d", port)
			_, addr := startTCP(t, TCPOptions{}, Route{Pool: newPool(t, "nginx", "leastconn", 0, 0, be), SendProxy: v})

			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.7")}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			status, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.Contains(status, "200") {
				t.Fatalf("nginx answered %q, %v", status, err)
			}
			want := "client=" + c.LocalAddr().String() + " peer=127.0.0.1"
			var log []byte
			eventually(t, 10*time.Second, "nginx logged the request", func() bool {
				log, _ = os.ReadFile(filepath.Join(dir, "access.log"))
				return len(log) > 0
			})
			if strings.TrimSpace(string(log)) != want {
				t.Fatalf("nginx logged %q, want %q", log, want)
			}
		})
	}
}

// nginxConf is a minimal nginx that logs the PROXY protocol client of each request.
func nginxConf(dir string, port int) string {
	return fmt.Sprintf(`daemon off;
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
        location / { return 200 "ok\n"; }
    }
}
`, dir, port)
}
