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

	"ballast/internal/peertest"
	"ballast/proxyproto"
)

var (
	peerDir   = peertest.Dir
	startPeer = peertest.Start
)

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
