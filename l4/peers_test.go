package l4

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ballast/internal/peertest"
	"ballast/proxyproto"
)

var ()

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
			be, accessLog := peertest.NginxProxyProtocol(t, nginx)
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
				log, _ = os.ReadFile(accessLog)
				return len(log) > 0
			})
			if strings.TrimSpace(string(log)) != want {
				t.Fatalf("nginx logged %q, want %q", log, want)
			}
		})
	}
}
