package httpcore

import (
	"net/netip"
	"strings"
	"testing"

	"ballast/config"
)

// forwardOf runs addForwarding for a request from ip with host over tls and returns what it set.
func forwardOf(ip netip.Addr, tls bool, host string, kv ...string) *testReq {
	r := newReq("GET", "/", kv...)
	r.host = host
	x := &Exchange{peer: ip, tls: tls}
	s := r.scan()
	x.AddForwarding(r, &s)
	return r
}

func TestForwardedElement(t *testing.T) {
	tests := []struct {
		ip   string
		tls  bool
		host string
		want string
	}{
		{"192.0.2.1", false, "example.com", "for=192.0.2.1;proto=http;host=example.com"},
		{"2001:db8::7", true, "example.com", `for="[2001:db8::7]";proto=https;host=example.com`},
		{"192.0.2.1", false, "example.com:8080", `for=192.0.2.1;proto=http;host="example.com:8080"`},
		{"192.0.2.1", false, `we"ird\`, `for=192.0.2.1;proto=http;host="we\"ird\\"`},
		{"", false, "", "for=unknown;proto=http"},
	}
	for _, tc := range tests {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		if got := forwardOf(ip, tc.tls, tc.host).get("Forwarded"); got != tc.want {
			t.Errorf("Forwarded for %s, tls %v, %q = %s, want %s", tc.ip, tc.tls, tc.host, got, tc.want)
		}
	}
}

func TestForwardingAppends(t *testing.T) {
	ip := netip.MustParseAddr("127.0.0.1")
	r := forwardOf(ip, true, "app.test", "X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "10.0.0.1", "Forwarded", "for=198.51.100.1")
	for k, want := range map[string]string{
		"X-Forwarded-For":   "198.51.100.1, 10.0.0.1, 127.0.0.1",
		"X-Forwarded-Proto": "https",
		"X-Forwarded-Host":  "app.test",
		"Forwarded":         "for=198.51.100.1, for=127.0.0.1;proto=https;host=app.test",
	} {
		if got := r.get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// FuzzForwardedElement checks that whatever the Host, the element stays one well-formed
// forwarded-element: no bare separators outside a quoted string, no control characters.
func FuzzForwardedElement(f *testing.F) {
	f.Add("example.com", []byte{192, 0, 2, 1})
	f.Add(`a"b\c;d,e`, []byte{0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, host string, ipb []byte) {
		ip, _ := netip.AddrFromSlice(ipb)
		out := forwardOf(ip, false, host).get("Forwarded")
		inQuote, esc := false, false
		for _, c := range []byte(out) {
			switch {
			case c < 0x20 && c != '\t' || c == 0x7f:
				t.Fatalf("control byte in %q", out)
			case esc:
				esc = false
			case inQuote && c == '\\':
				esc = true
			case c == '"':
				inQuote = !inQuote
			case !inQuote && (c == ',' || c == ' '):
				t.Fatalf("separator outside quotes in %q", out)
			}
		}
		if inQuote {
			t.Fatalf("unterminated quote in %q", out)
		}
	})
}

func TestStripHopByHop(t *testing.T) {
	tests := []struct {
		name              string
		in                []string
		keepUpgrade, keep bool
		kept              []string
		gone              []string
	}{
		{"connection names", []string{"Connection", "close, X-A , x-b", "X-A", "1", "X-B", "2", "X-C", "3"}, false, false,
			[]string{"X-C"}, []string{"X-A", "X-B", "Connection"}},
		{"fixed list", []string{"Keep-Alive", "1", "Te", "trailers", "Upgrade", "h2c", "Proxy-Authorization", "x", "Proxy-Connection", "y", "Trailer", "X-T", "Expect", "100-continue"}, false, false,
			[]string{"Trailer"}, []string{"Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "Expect"}},
		{"none", []string{"X-A", "1", "Content-Type", "text/plain"}, false, false, []string{"X-A", "Content-Type"}, nil},
		{"framing protected", []string{"Connection", "Host, Content-Length, X-A", "Host", "h", "Content-Length", "3", "X-A", "1"}, false, false,
			[]string{"Host", "Content-Length"}, []string{"X-A"}},
		{"upgrade kept", []string{"Connection", "Upgrade, X-A", "Upgrade", "websocket", "X-A", "1"}, true, false,
			[]string{"Upgrade", "Connection"}, []string{"X-A"}},
		{"TE trailers kept on HTTP/2", []string{"Te", "trailers"}, false, true, []string{"Te"}, nil},
		{"TE gzip gone on HTTP/2", []string{"Te", "gzip"}, false, true, nil, []string{"Te"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReq("GET", "/", tc.in...)
			s := r.scan()
			var x Exchange
			x.StripHopByHop(r, &s, tc.keepUpgrade, tc.keep)
			for _, k := range tc.kept {
				if len(r.Peek([]byte(k))) == 0 {
					t.Errorf("%s stripped", k)
				}
			}
			for _, k := range tc.gone {
				if v := r.Peek([]byte(k)); len(v) > 0 {
					t.Errorf("%s kept: %q", k, v)
				}
			}
		})
	}
}

// FuzzStripHopByHop: whatever Connection lists, every listed field that is not a connection
// option nor a framing field is gone afterwards, and the fixed list's fields are gone too.
func FuzzStripHopByHop(f *testing.F) {
	f.Add("keep-alive, X-A", "X-A")
	f.Add(" ,,x-b ,close", "X-B")
	f.Fuzz(func(t *testing.T, conn, other string) {
		r := newReq("GET", "/", "Connection", conn, "Keep-Alive", "1")
		if IsToken([]byte(other)) {
			r.Add([]byte(other), []byte("v"))
		}
		s := r.scan()
		var x Exchange
		x.StripHopByHop(r, &s, false, false)
		if len(r.Peek([]byte("Keep-Alive"))) > 0 || len(r.Peek([]byte("Connection"))) > 0 {
			t.Fatalf("fixed hop-by-hop field kept (Connection %q)", conn)
		}
		for _, tok := range strings.Split(conn, ",") {
			tok = strings.Trim(tok, " \t")
			switch strings.ToLower(tok) {
			case "close", "keep-alive", "host", "content-length", "transfer-encoding", "trailer", "":
				continue
			}
			if len(r.Peek([]byte(tok))) > 0 {
				t.Fatalf("%q named by Connection %q kept", tok, conn)
			}
		}
	})
}

// FuzzForwardedClient: whatever X-Forwarded-For a trusted proxy sends, the client found is
// the peer or an address that appears in the field, never a panic.
func FuzzForwardedClient(f *testing.F) {
	f.Add("203.0.113.9, 10.1.1.1")
	f.Add(" , ,::ffff:1.2.3.4,")
	f.Add("junk")
	tp := &tablePolicy{}
	tp.trusted, _ = config.ParsePrefixes([]string{"127.0.0.1", "10.0.0.0/8"})
	peer := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, xff string) {
		got := tp.forwardedClient([]byte(xff), peer)
		if got == peer {
			return
		}
		for _, tok := range strings.Split(xff, ",") {
			if a, err := netip.ParseAddr(strings.Trim(tok, " \t")); err == nil && a.Unmap() == got {
				return
			}
		}
		t.Fatalf("forwardedClient(%q) = %s, which is not in the field", xff, got)
	})
}

func TestForwardedClient(t *testing.T) {
	tp := &tablePolicy{}
	tp.trusted, _ = config.ParsePrefixes([]string{"127.0.0.1", "10.0.0.0/8"})
	peer := netip.MustParseAddr("127.0.0.1")
	for xff, want := range map[string]string{
		"203.0.113.9":                         "203.0.113.9",
		"203.0.113.9, 10.1.1.1":               "203.0.113.9",
		"198.51.100.1, 203.0.113.9, 10.0.0.2": "203.0.113.9",
		"10.0.0.1, 10.0.0.2":                  "10.0.0.1",
		"junk, 203.0.113.9":                   "203.0.113.9",
		"203.0.113.9, junk":                   "127.0.0.1",
	} {
		if got := tp.forwardedClient([]byte(xff), peer); got.String() != want {
			t.Errorf("forwardedClient(%q) = %s, want %s", xff, got, want)
		}
	}
}
