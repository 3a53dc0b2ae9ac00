//go:build linux

package h1

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"ballast/config"
	"ballast/internal/testcert"
)

// grpc-go's interop client runs the standard cases through the shards (an h2c listener) to
// grpc-go's interop server behind a pool with protocol h2c: unary, client, server and
// bidirectional streaming (ping_pong: each request message answered before the next is
// sent, the request body going on after the response head), cancellations, deadlines,
// statuses and metadata in headers and trailers; and the same to a pool with protocol h2
// (grpc-go's server over TLS, ALPN h2, its certificate verified). A failing case ends the test binary (the
// interop package calls log.Fatal).
func TestH2BackendGRPCInterop(t *testing.T) {
	for _, kind := range []string{config.BackendH2C, config.BackendH2} {
		t.Run(kind, func(t *testing.T) { testH2BackendGRPCInterop(t, kind) })
	}
}

func testH2BackendGRPCInterop(t *testing.T, kind string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	pool := h2cPool("grpc", ln.Addr().String())
	if kind == config.BackendH2 { // grpc-go over TLS: it insists on ALPN h2
		certFile, keyFile := testcert.Write(t, t.TempDir(), "grpc", 1, "backend.test")
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewServerTLSFromCert(&kp)))
		pool.Protocol, pool.TLS = config.BackendH2, &config.BackendTLS{CA: certFile, ServerName: "backend.test"}
	}
	gs := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(gs, interop.NewTestServer())
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	te, _ := h2cEngine(t, testConfig(pool), nil)
	conn, err := grpc.NewClient("passthrough:///"+te.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tc := testgrpc.NewTestServiceClient(conn)
	for _, c := range grpcInteropCases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c.run(ctx, tc)
		})
	}
	t.Run("unimplemented_method", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		interop.DoUnimplementedMethod(ctx, conn)
	})
	if st := te.H2BackendStats(); st.Streams < 12 {
		t.Errorf("HTTP/2 backend streams %d: the calls did not go over the shards' backend connections", st.Streams)
	}
}

// grpcInteropCases are grpc-go's interop cases (google.golang.org/grpc/interop) that every
// path to a gRPC backend runs.
var grpcInteropCases = []struct {
	name string
	run  func(context.Context, testgrpc.TestServiceClient, ...grpc.CallOption)
}{
	{"empty_unary", interop.DoEmptyUnaryCall},
	{"large_unary", interop.DoLargeUnaryCall},
	{"client_streaming", interop.DoClientStreaming},
	{"server_streaming", interop.DoServerStreaming},
	{"ping_pong", interop.DoPingPong},
	{"empty_stream", interop.DoEmptyStream},
	{"cancel_after_begin", interop.DoCancelAfterBegin},
	{"cancel_after_first_response", interop.DoCancelAfterFirstResponse},
	{"timeout_on_sleeping_server", interop.DoTimeoutOnSleepingServer},
	{"status_code_and_message", interop.DoStatusCodeAndMessage},
	{"special_status_message", interop.DoSpecialStatusMessage},
	{"custom_metadata", interop.DoCustomMetadata},
}
