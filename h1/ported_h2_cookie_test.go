//go:build linux

package h1

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
	"ballast/internal/h1conformance"
)

// TestCookieForwardedAsSent: a client's Cookie field reaches the backend byte for byte, over
// HTTP/1.1 and h2c, also when the pool reads a cookie (sticky, hash by cookie). Found by
// FuzzH2Request1 (the analog of h2proxy's FuzzRequest1): the engine's scan of the fields made
// fasthttp parse Cookie into pairs, which it then wrote again instead of the field, so that
// `"` and `a="b` were dropped, `=x` became `x` and `a=1;;b=2` became `a=1; b=2`.
func TestCookieForwardedAsSent(t *testing.T) {
	values := []string{`"`, `a="b`, `=x`, `a=1;;b=2`, `bsid=zz; a=1`, `a=1; b=2`}
	for _, pc := range []struct {
		name  string
		setup func(*config.Pool)
	}{
		{"plain", func(*config.Pool) {}},
		{"sticky", func(p *config.Pool) { p.Sticky = &config.Sticky{Cookie: "bsid"} }},
		{"hash by cookie", func(p *config.Pool) { p.Balancer, p.HashKey = "ringhash", config.HashKey{Source: "cookie", Name: "a"} }},
	} {
		t.Run(pc.name, func(t *testing.T) {
			rb := h1conformance.NewRawBackend(t)
			pool := testPool("p", "roundrobin", rb.Addr())
			pc.setup(&pool)
			te, _ := h2cEngine(t, testConfig(pool), nil)
			for _, v := range values {
				raw := "GET /c HTTP/1.1\r\nHost: h\r\nCookie: " + v + "\r\nConnection: close\r\n\r\n"
				if out := h1conformance.Exchange(t, te.addr, []byte(raw)); !bytes.HasPrefix(out, []byte("HTTP/1.1 200")) {
					t.Fatalf("HTTP/1.1 Cookie %q: %q", v, out)
				}
				_, fwd := rb.Take(t)
				checkCookie(t, "HTTP/1.1", v, fwd)
				if st := h2Cookie(t, te.addr, v); st != "200" {
					t.Fatalf("h2c cookie %q: %s", v, st)
				}
				_, fwd = rb.Take(t)
				checkCookie(t, "h2c", v, fwd)
			}
		})
	}
}

func checkCookie(t *testing.T, over, sent string, fwd []h1conformance.Request) {
	t.Helper()
	if len(fwd) != 1 {
		t.Fatalf("%s: %d requests at the backend", over, len(fwd))
	}
	if got, n := fieldOf(fwd[0].Raw, "cookie"); n != 1 || got != sent {
		t.Errorf("%s: Cookie %q reached the backend as %q (%d fields)", over, sent, got, n)
	}
}

// h2Cookie sends GET /c with the cookie field value v on a fresh h2c connection and returns
// the stream's :status.
func h2Cookie(t *testing.T, addr, v string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "h"}, {":path", "/c"}, {"cookie", v}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("h2c cookie %q: %v", v, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			return "reset"
		}
	}
}

// TestCookieRules: request header rules on Cookie reach the backend as configured, over
// HTTP/1.1 and h2c: add keeps the client's field as sent and appends the rule's, remove
// drops every Cookie field.
func TestCookieRules(t *testing.T) {
	const sent = `a=1;;b=2`
	for _, rc := range []struct {
		name  string
		rules config.HeaderRules
		want  []string
	}{
		{"add", config.HeaderRules{Add: []string{"Cookie: edge=1"}}, []string{sent, "edge=1"}},
		{"remove", config.HeaderRules{Remove: []string{"Cookie"}}, nil},
		{"remove then add", config.HeaderRules{Remove: []string{"cookie"}, Add: []string{"Cookie: =x"}}, []string{"=x"}},
	} {
		t.Run(rc.name, func(t *testing.T) {
			rb := h1conformance.NewRawBackend(t)
			cfg := testConfig(testPool("p", "roundrobin", rb.Addr()))
			rules := rc.rules
			cfg.Routes[0].RoutePolicy = config.RoutePolicy{RequestHeaders: &rules}
			te, _ := h2cEngine(t, cfg, nil)
			raw := "GET /c HTTP/1.1\r\nHost: h\r\nCookie: " + sent + "\r\nConnection: close\r\n\r\n"
			if out := h1conformance.Exchange(t, te.addr, []byte(raw)); !bytes.HasPrefix(out, []byte("HTTP/1.1 200")) {
				t.Fatalf("HTTP/1.1: %q", out)
			}
			_, fwd := rb.Take(t)
			checkCookies(t, "HTTP/1.1", rc.want, fwd)
			if st := h2Cookie(t, te.addr, sent); st != "200" {
				t.Fatalf("h2c: %s", st)
			}
			_, fwd = rb.Take(t)
			checkCookies(t, "h2c", rc.want, fwd)
		})
	}
}

func checkCookies(t *testing.T, over string, want []string, fwd []h1conformance.Request) {
	t.Helper()
	if len(fwd) != 1 {
		t.Fatalf("%s: %d requests at the backend", over, len(fwd))
	}
	var got []string
	for _, l := range strings.Split(string(fwd[0].Raw), "\r\n")[1:] {
		if l == "" {
			break
		}
		if k, v, _ := strings.Cut(l, ":"); strings.EqualFold(k, "cookie") {
			got = append(got, strings.Trim(v, " \t"))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
		t.Errorf("%s: the backend got Cookie fields %q, want %q", over, got, want)
	}
}
