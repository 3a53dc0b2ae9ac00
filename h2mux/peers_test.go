package h2mux_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ballast/internal/h2muxtest"
)

// planes are the two ways a client reaches the state machine: TLS with ALPN h2, and h2c.
type plane struct {
	name, url string
	client    *http.Client
	curl      []string
}

func planes(t *testing.T, srv *h2muxtest.Server) []plane {
	tlsAddr, h2cAddr := fronts(t, srv)
	var tp, cp http.Protocols
	tp.SetHTTP2(true)
	cp.SetUnencryptedHTTP2(true)
	return []plane{
		{"tls", "https://" + tlsAddr + "/", &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
			Protocols: &tp, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}, []string{"--http2", "-k"}},
		{"h2c", "http://" + h2cAddr + "/", &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Protocols: &cp}}, []string{"--http2-prior-knowledge"}},
	}
}

// TestCurl: curl's GET, HEAD and POST (1 MiB body) over both planes.
func TestCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	srv := page()
	body := filepath.Join(t.TempDir(), "body")
	os.WriteFile(body, bytes.Repeat([]byte("p"), 1<<20), 0o600)
	for _, p := range planes(t, srv) {
		for _, c := range []struct {
			name string
			args []string
			want string
		}{
			{"GET", nil, "2 200 " + string(srv.Page)},
			{"HEAD", []string{"-I"}, "2 200 "},
			{"POST", []string{"--data-binary", "@" + body}, "2 200 " + string(srv.Page)},
		} {
			t.Run(p.name+" "+c.name, func(t *testing.T) {
				args := append(append([]string{"-sS", "-o", "-", "-w", "%{http_version} %{http_code} "}, p.curl...), c.args...)
				out, err := exec.Command("curl", append(args, p.url)...).CombinedOutput()
				if err != nil {
					t.Fatalf("curl: %v\n%s", err, out)
				}
				got := string(out)
				if c.name == "HEAD" { // -I prints the head first
					got = got[strings.LastIndex(got, "\r\n")+2:]
				} else {
					got = got[len(srv.Page):] + string(srv.Page)
				}
				if got != c.want {
					t.Errorf("curl printed %q, want %q", out, c.want)
				}
			})
		}
	}
}

// TestH2Load: h2load's multiplexed load over both planes, every request answered.
func TestH2Load(t *testing.T) {
	if _, err := exec.LookPath("h2load"); err != nil {
		t.Skip("no h2load")
	}
	srv := page()
	for _, p := range planes(t, srv) {
		for _, load := range [][]string{{"-c", "4", "-m", "10"}, {"-c", "32", "-m", "1"}} {
			t.Run(p.name+" "+strings.Join(load, " "), func(t *testing.T) {
				out, err := exec.Command("h2load", append(append([]string{"-n", "4000"}, load...), p.url)...).CombinedOutput()
				if err != nil {
					t.Fatalf("h2load: %v\n%s", err, out)
				}
				if !regexp.MustCompile(`status codes: 4000 2xx`).Match(out) {
					t.Errorf("h2load:\n%s", out)
				}
			})
		}
	}
}

// TestGoClient: Go's HTTP/2 client moves 64 MiB each way through one stream, over both
// planes, with many streams at once beside it.
func TestGoClient(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	srv := &h2muxtest.Server{Page: big, ContentType: "application/octet-stream"}
	for _, p := range planes(t, srv) {
		t.Run(p.name, func(t *testing.T) {
			resp, err := p.client.Get(p.url)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, big) || resp.ProtoMajor != 2 {
				t.Fatalf("GET: %d bytes, %v, %s", len(got), err, resp.Proto)
			}
			req, _ := http.NewRequest("POST", p.url, bytes.NewReader(big))
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, err = p.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || n != int64(len(big)) {
				t.Fatalf("POST: %d, %d bytes back", resp.StatusCode, n)
			}
			errs := make(chan error, 50)
			for i := 0; i < 50; i++ {
				go func() {
					req, _ := http.NewRequest("HEAD", p.url, nil)
					resp, err := p.client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					errs <- err
				}()
			}
			for i := 0; i < 50; i++ {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}
