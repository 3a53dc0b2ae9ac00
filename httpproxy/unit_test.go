package httpproxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

func TestBuildForwarded(t *testing.T) {
	tests := []struct {
		ip    string
		proto string
		host  string
		want  string
	}{
		{"192.0.2.1", "http", "example.com", "for=192.0.2.1;proto=http;host=example.com"},
		{"2001:db8::7", "https", "example.com", `for="[2001:db8::7]";proto=https;host=example.com`},
		{"192.0.2.1", "http", "example.com:8080", `for=192.0.2.1;proto=http;host="example.com:8080"`},
		{"192.0.2.1", "http", `we"ird\`, `for=192.0.2.1;proto=http;host="we\"ird\\"`},
		{"", "http", "", "for=unknown;proto=http"},
	}
	for _, tc := range tests {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		if got := string(buildForwarded(nil, ip, tc.proto, []byte(tc.host))); got != tc.want {
			t.Errorf("buildForwarded(%s, %s, %q) = %s, want %s", tc.ip, tc.proto, tc.host, got, tc.want)
		}
	}
}

// FuzzBuildForwarded checks that whatever the Host, the element stays one well-formed
// forwarded-element: no bare separators outside a quoted string, no control characters.
func FuzzBuildForwarded(f *testing.F) {
	f.Add([]byte("example.com"), []byte{192, 0, 2, 1})
	f.Add([]byte(`a"b\c;d,e`), []byte{0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, host, ipb []byte) {
		ip, _ := netip.AddrFromSlice(ipb)
		out := buildForwarded(nil, ip, "http", host)
		inQuote, esc := false, false
		for _, c := range out {
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
		name        string
		in          map[string]string
		keepUpgrade bool
		kept        []string
		gone        []string
	}{
		{"connection names", map[string]string{"Connection": "close, X-A , x-b", "X-A": "1", "X-B": "2", "X-C": "3"}, false,
			[]string{"X-C"}, []string{"X-A", "X-B", "Connection"}},
		{"fixed list", map[string]string{"Keep-Alive": "1", "Te": "trailers", "Upgrade": "h2c", "Proxy-Authorization": "x", "Proxy-Connection": "y", "Trailer": "X-T", "Expect": "100-continue"}, false,
			[]string{"Trailer"}, []string{"Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "Expect"}},
		{"none", map[string]string{"X-A": "1", "Content-Type": "text/plain"}, false, []string{"X-A", "Content-Type"}, nil},
		{"framing protected", map[string]string{"Connection": "Host, Content-Length, X-A", "Host": "h", "Content-Length": "3", "X-A": "1"}, false,
			[]string{"Host", "Content-Length"}, []string{"X-A"}},
		{"upgrade kept", map[string]string{"Connection": "Upgrade, X-A", "Upgrade": "websocket", "X-A": "1"}, true,
			[]string{"Upgrade", "Connection"}, []string{"X-A"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for k, v := range tc.in {
				h.Set(k, v)
			}
			stripHopByHop(&h, scanHeaders(h.All()).hop, tc.keepUpgrade)
			for _, k := range tc.kept {
				if len(h.Peek(k)) == 0 {
					t.Errorf("%s stripped", k)
				}
			}
			for _, k := range tc.gone {
				if v := h.Peek(k); len(v) > 0 {
					t.Errorf("%s kept: %q", k, v)
				}
			}
		})
	}
}

func TestScanFieldLines(t *testing.T) {
	tests := []struct {
		raw   string
		found uint8
		ok    bool
	}{
		{"Host: x\r\nContent-Length: 5\r\n\r\n", fieldHost | fieldContentLength, true},
		{"host: x\r\ncontent-length:5\r\n", fieldHost | fieldContentLength, true},
		{"X-Host: x\r\nX-Content-Length: 5\r\n", 0, true},
		{"Transfer-Encoding: chunked\r\nContent-Length: 1\r\n", fieldTransferEncoding | fieldContentLength, true},
		{"", 0, true},
		{"X Forwarded For: 1\r\n", 0, false},
		{"Transfer-Encoding : chunked\r\n", 0, false},
		{"X-A: 1\r\n 2\r\n", 0, false},
		{": 1\r\n", 0, false},
		{"X@Y: 1\r\n", 0, false},
		{"X-A 1\r\n", 0, false},
	}
	for _, tc := range tests {
		if found, ok := scanFieldLines([]byte(tc.raw)); found != tc.found || ok != tc.ok {
			t.Errorf("scanFieldLines(%q) = %b, %v; want %b, %v", tc.raw, found, ok, tc.found, tc.ok)
		}
	}
}

func TestRouteMatch(t *testing.T) {
	ps := map[string]*poolState{"a": {name: "a"}, "b": {name: "b"}, "c": {name: "c"}}
	tb := &table{}
	for _, r := range []config.Route{
		{Listener: "admin", Pool: "c"},
		{Host: "Api.Example.com", PathPrefix: "/v1/", Pool: "a"},
		{PathPrefix: "/static/", Pool: "b"},
		{Pool: "a"},
	} {
		tb.routes = append(tb.routes, route{listener: r.Listener, host: []byte(strings.ToLower(r.Host)), prefix: []byte(r.PathPrefix), ps: ps[r.Pool]})
	}
	tests := []struct{ listener, host, path, want string }{
		{"web", "api.example.com", "/v1/users", "a"},
		{"web", "API.EXAMPLE.COM:8443", "/v1/x", "a"},
		{"web", "other.com", "/v1/x", "a"},
		{"web", "other.com", "/static/x.css", "b"},
		{"admin", "api.example.com", "/v1/", "c"},
		{"web", "[::1]:80", "/", "a"},
	}
	for _, tc := range tests {
		r := tb.match(tc.listener, []byte(tc.host), []byte(tc.path))
		if r == nil || r.ps.name != tc.want {
			t.Errorf("match(%s, %s, %s) = %v, want %s", tc.listener, tc.host, tc.path, r, tc.want)
		}
	}
	if r := (&table{routes: tb.routes[1:3]}).match("web", []byte("x"), []byte("/")); r != nil {
		t.Errorf("unmatched request matched %s", r.ps.name)
	}
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget(0.2)
	const sec = 1000
	for i := 0; i < 100; i++ {
		b.request(sec)
	}
	spent := 0
	for b.spend(sec) {
		spent++
		if spent > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if want := 20 + 2*budgetMinPerSecond; spent != want {
		t.Errorf("spent %d retries for 100 requests at 20%%, want %d", spent, want)
	}
	// One second later the previous second still counts; two seconds later it is gone.
	if b.spend(sec + 1) {
		t.Error("budget refilled after one second")
	}
	if !b.spend(sec + 3) {
		t.Error("budget not refilled after the window passed")
	}
}

// FuzzStripHopByHop: whatever Connection lists, every listed header that is not a connection
// option is gone afterwards, and the headers the fixed list names are gone too.
func FuzzStripHopByHop(f *testing.F) {
	f.Add("keep-alive, X-A", "X-A")
	f.Add(" ,,x-b ,close", "X-B")
	f.Fuzz(func(t *testing.T, conn, other string) {
		var h fasthttp.RequestHeader
		h.Set("Connection", conn)
		h.Set("Keep-Alive", "1")
		if isToken([]byte(other)) {
			h.Set(other, "v")
		}
		stripHopByHop(&h, scanHeaders(h.All()).hop, false)
		if len(h.Peek("Keep-Alive")) > 0 || len(h.Peek("Connection")) > 0 {
			t.Fatalf("fixed hop-by-hop header kept (Connection %q)", conn)
		}
		forEachToken([]byte(conn), func(tok []byte) {
			if asciiEqualFold(tok, "close") || asciiEqualFold(tok, "keep-alive") || !isToken(tok) ||
				asciiEqualFold(tok, "host") || asciiEqualFold(tok, "content-length") ||
				asciiEqualFold(tok, "transfer-encoding") || asciiEqualFold(tok, "trailer") {
				return
			}
			if len(h.Peek(string(tok))) > 0 {
				t.Fatalf("%q named by Connection %q kept", tok, conn)
			}
		})
	})
}

func FuzzScanFieldLines(f *testing.F) {
	f.Add([]byte("Host: x\r\nContent-Length: 5\r\n\r\n"))
	f.Add([]byte("X A: 1\r\n\tb\r\nTransfer-Encoding: chunked\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		found, ok := scanFieldLines(raw)
		var want uint8
		wantOK := true
		for _, line := range strings.Split(string(raw), "\n") {
			if line == "" || line[0] == '\r' {
				break
			}
			name, _, colon := strings.Cut(line, ":")
			if !colon || !isToken([]byte(name)) {
				wantOK = false
				break
			}
			switch strings.ToLower(name) {
			case "content-length":
				want |= fieldContentLength
			case "transfer-encoding":
				want |= fieldTransferEncoding
			case "host":
				want |= fieldHost
			}
		}
		if ok != wantOK || ok && found != want {
			t.Fatalf("scanFieldLines(%q) = %b, %v; want %b, %v", raw, found, ok, want, wantOK)
		}
	})
}
