//go:build linux

package h1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestIdleConnectionServedAgain is the fasthttp plane's TestIdleConnectionParking and the
// client-close case of TestParkedConnectionLimits as the engine has them: a keep-alive
// connection that went idle after its first response (no exchange on it, nothing held for
// it) is served again, with every kind of next request, when it becomes readable, and goes
// idle again; a client that closes an idle connection has it leave the engine. (The other
// cases of TestParkedConnectionLimits: idle_timeout is TestIdleFlood, max_keepalive_requests
// TestMaxKeepAliveRequests, Shutdown closing idle connections TestShutdownDrains.)
func TestIdleConnectionServedAgain(t *testing.T) {
	be := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	})
	tests := []struct {
		name string
		next string   // written at once after the connection went idle
		want []string // the bodies of the answers, in order
	}{
		{"GET", "GET /b HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET /b "}},
		{"POST with a body", "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", []string{"POST /p hello"}},
		{"chunked body", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []string{"POST /c abc"}},
		{"two pipelined", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET /1 ", "GET /2 "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			te := startEngine(t, testConfig(testPool("p", "roundrobin", be)))
			c, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			answer := func() string {
				t.Helper()
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return string(b)
			}
			idle := func() bool { st := te.Stats(); return st.Conns == 1 && st.Active == 0 }
			if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if body := answer(); body != "GET /a " {
				t.Fatalf("first answer %q", body)
			}
			waitFor(t, "the connection idle", idle)
			if _, err := io.WriteString(c, tc.next); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if body := answer(); body != want {
					t.Fatalf("answer after idling %q, want %q", body, want)
				}
			}
			waitFor(t, "the connection idle again", idle)
			if _, err := io.WriteString(c, "GET /again HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if body := answer(); body != "GET /again " {
				t.Fatalf("answer after idling again %q", body)
			}
			waitFor(t, "the connection idle at the end", idle)
			_ = c.Close()
			waitFor(t, "the closed connection to leave the engine", func() bool { return te.Stats().Conns == 0 })
		})
	}
}
