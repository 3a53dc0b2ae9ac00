//go:build linux

package h1

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWebSocketEchoTLS is the fasthttp plane's TestWebSocketEcho over the engine's TLS
// listener: a real WebSocket client (wss, HTTP/1.1 by ALPN) gets the backend's 101 and a
// tunnel on the shard through crypto/tls records both ways, counted in flight for its life.
func TestWebSocketEchoTLS(t *testing.T) {
	hb := startHTTPBin(t)
	te := startTLSEngine(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}}
	conn, resp, err := websocket.Dial(ctx, "wss://"+te.addr+"/websocket/echo", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 20)
	if resp.Header.Get("X-Ballast-Backend") == "" {
		t.Errorf("101 without X-Ballast-Backend")
	}
	waitFor(t, "tunnel counted in flight", func() bool { return inflight(te.pools["bin"]) == 1 })
	for i, msg := range []string{"hello", strings.Repeat("x", 70000), "bye"} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if string(got) != msg {
			t.Fatalf("echo %d: got %d bytes, want %d", i, len(got), len(msg))
		}
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "tunnel released", func() bool { return inflight(te.pools["bin"]) == 0 })
}
