//go:build linux

package h1

import (
	"ballast/internal/refused"
	"ballast/internal/testcert"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// interopServer runs grpc-go's interop test server on loopback: cleartext (for h2c pools) or
// with TLS (for h2 pools; caFile verifies it).
func interopServer(t *testing.T, withTLS bool) (addr, caFile string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if withTLS {
		cert, key := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp}})))
		caFile = cert
	}
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String(), caFile
}

// grpc-go's interop client runs the standard test cases through Ballast against grpc-go's
// interop server: through the h2c and the TLS front end, to h2c and h2 (TLS) backends.
// A failing case ends the test binary (the interop package calls log.Fatal).
func TestGRPCInterop(t *testing.T) {
	plain, _ := interopServer(t, false)
	secure, ca := interopServer(t, true)
	cert, key := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	s := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: h2c, address: "127.0.0.1:0", h2c: true}
  - {name: tls, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}
  - {name: tls-to-h2, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}
pools:
  - {name: plain, protocol: h2c, backends: [{address: %s}]}
  - {name: secure, protocol: h2, tls: {ca: %s, server_name: localhost}, backends: [{address: %s}]}
routes:
  - {listener: tls-to-h2, pool: secure}
  - {pool: plain}
`, cert, key, cert, key, plain, ca, secure))

	fronts := []struct {
		name, listener string
		creds          credentials.TransportCredentials
	}{
		{"h2c front, h2c backend", "h2c", insecure.NewCredentials()},
		{"TLS front, h2c backend", "tls", credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})},
		{"TLS front, h2 (TLS) backend", "tls-to-h2", credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})},
	}
	for _, f := range fronts {
		conn, err := grpc.NewClient("passthrough:///"+s.Addr(f.listener).String(), grpc.WithTransportCredentials(f.creds))
		if err != nil {
			t.Fatal(err)
		}
		tc := testgrpc.NewTestServiceClient(conn)
		for _, c := range grpcInteropCases {
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				c.run(ctx, tc)
			})
		}
		t.Run(f.name+"/unimplemented_method", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			interop.DoUnimplementedMethod(ctx, conn)
		})
		conn.Close()
	}
}

// A real gRPC client sees a pool with no live backend as codes.Unavailable with Ballast's
// message, not as an HTTP error.
func TestGRPCClientSeesUnavailable(t *testing.T) {
	deadAddr := refused.TCP(t)
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: h2c, backends: [{address: %s}]}]
`, deadAddr))
	conn, err := grpc.NewClient("passthrough:///"+s.Addr("in").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = testgrpc.NewTestServiceClient(conn).EmptyCall(ctx, &testgrpc.Empty{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "ballast") {
		t.Errorf("got %v, want Unavailable from ballast", err)
	}
}
