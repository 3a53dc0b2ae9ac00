package l4

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// selfSigned makes a certificate for name.
func selfSigned(t testing.TB, name string) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// tlsServer is a TLS backend with a certificate for name that writes name and echoes.
func tlsServer(t testing.TB, name string) string {
	cfg := &tls.Config{Certificates: []tls.Certificate{selfSigned(t, name)}}
	return tcpServer(t, func(c *net.TCPConn) {
		tc := tls.Server(c, cfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		io.WriteString(tc, name+"\n")
		io.Copy(tc, tc)
	})
}

// TestTCPSNIRouting: TLS passes through unterminated; the ClientHello's server name picks the
// pool (exact and wildcard routes), and a connection without a matching name takes the default.
func TestTCPSNIRouting(t *testing.T) {
	a := newPool(t, "a", "leastconn", 0, 0, tlsServer(t, "a.test"))
	b := newPool(t, "b", "leastconn", 0, 0, tlsServer(t, "x.b.test"))
	def := newPool(t, "def", "leastconn", 0, 0, tlsServer(t, "default.test"))
	_, addr := startTCP(t, TCPOptions{},
		Route{SNI: []string{"a.test"}, Pool: a},
		Route{SNI: []string{"*.B.test"}, Pool: b},
		Route{Pool: def})
	cases := []struct{ sni, want string }{
		{"a.test", "a.test"},
		{"A.Test", "a.test"},
		{"x.b.test", "x.b.test"},
		{"y.x.b.test", "default.test"}, // the wildcard covers one label
		{"other.test", "default.test"},
		{"", "default.test"},
	}
	for _, c := range cases {
		t.Run(c.sni, func(t *testing.T) {
			tc := tls.Client(dialTCP(t, addr), &tls.Config{ServerName: c.sni, InsecureSkipVerify: true})
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if cn := tc.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != c.want {
				t.Fatalf("handshake with %s's certificate, want %s", cn, c.want)
			}
			if got := readLine(t, tc); got != c.want {
				t.Fatalf("backend %q", got)
			}
			io.WriteString(tc, "ping")
			buf := make([]byte, 4)
			if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo %q %v", buf, err)
			}
		})
	}
}

// TestTCPSNIOnly: with only SNI routes, a connection whose name matches none, or that is not
// TLS, is closed and counted.
func TestTCPSNIOnly(t *testing.T) {
	a := newPool(t, "a", "leastconn", 0, 0, tlsServer(t, "a.test"))
	p, addr := startTCP(t, TCPOptions{HandshakeTimeout: time.Second}, Route{SNI: []string{"a.test"}, Pool: a})
	tc := tls.Client(dialTCP(t, addr), &tls.Config{ServerName: "nope.test", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake succeeded without a route")
	}
	c := dialTCP(t, addr)
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("plain text got an answer")
	}
	eventually(t, 5*time.Second, "no-route counted", func() bool { return p.Stats().NoRoute == 2 })
}

// TestParseHello: the SNI parser on a real ClientHello split at every byte, and on refusals.
func TestParseHello(t *testing.T) {
	hello := captureHello(t, "Split.Example")
	for i := 0; i < len(hello); i++ {
		if _, err := parseHello(hello[:i]); err != errShortHello {
			t.Fatalf("prefix %d of %d: %v, want errShortHello", i, len(hello), err)
		}
	}
	if name, err := parseHello(hello); err != nil || name != "split.example" {
		t.Fatalf("full hello: %q %v", name, err)
	}
	// The same hello fragmented over two handshake records.
	body := hello[5:]
	frag := append([]byte{22, 3, 1, 0, 10}, body[:10]...)
	frag = append(frag, 22, 3, 1, byte((len(body)-10)>>8), byte(len(body)-10))
	frag = append(frag, body[10:]...)
	if name, err := parseHello(frag); err != nil || name != "split.example" {
		t.Fatalf("fragmented hello: %q %v", name, err)
	}
	for _, bad := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n"),
		{22, 3, 1, 0, 0},                                       // empty record
		{22, 3, 1, 0x50, 0},                                    // record longer than 16 KiB
		{23, 3, 3, 0, 5, 1, 2, 3, 4},                           // application data
		{22, 3, 1, 0, 4, 2, 0, 0, 0},                           // a ServerHello
		append([]byte{22, 3, 1, 0, 8, 1, 0, 0, 4}, 3, 3, 0, 0), // truncated body
	} {
		if _, err := parseHello(bad); err != errNotHello {
			t.Fatalf("%x: %v, want errNotHello", bad, err)
		}
	}
}

// captureHello returns the ClientHello crypto/tls sends for sni.
func captureHello(t testing.TB, sni string) []byte {
	t.Helper()
	cc, sc := net.Pipe()
	go func() {
		tls.Client(cc, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
		cc.Close()
	}()
	defer sc.Close()
	sc.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(sc, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(sc, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

func FuzzParseHello(f *testing.F) {
	f.Add(captureHello(f, "fuzz.example"))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := parseHello(b)
		if err == nil && len(name) > len(b) {
			t.Fatalf("name %q longer than input", name)
		}
	})
}

// TestTCPSNISilentClient: on a listener with SNI routes, a client that sends nothing within
// the handshake timeout (a server-speaks-first protocol) goes to the route without SNI.
func TestTCPSNISilentClient(t *testing.T) {
	a := newPool(t, "a", "leastconn", 0, 0, tlsServer(t, "a.test"))
	def := newPool(t, "def", "leastconn", 0, 0, tcpServer(t, named("banner")))
	_, addr := startTCP(t, TCPOptions{HandshakeTimeout: 200 * time.Millisecond},
		Route{SNI: []string{"a.test"}, Pool: a}, Route{Pool: def})
	c := dialTCP(t, addr)
	if got := readLine(t, c); got != "banner" {
		t.Fatalf("silent client got %q", got)
	}
}
