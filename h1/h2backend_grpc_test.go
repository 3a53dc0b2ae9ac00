//go:build linux

package h1

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// gRPC through the shards both ways: a grpc-go client over h2c to the engine, a grpc-go
// server behind a pool with protocol h2c. Unary calls (OK, and an error whose grpc-status
// and grpc-message come back in the trailers, or in a trailers-only response), and a
// server-streaming call whose messages arrive as the server sends them.
func TestH2BackendGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	cfg := testConfig(h2cPool("grpc", ln.Addr().String()))
	te, _ := h2cEngine(t, cfg, nil)
	cc, err := grpc.NewClient(te.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, tc := range []struct {
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
		code    codes.Code
	}{
		{"up", healthpb.HealthCheckResponse_SERVING, codes.OK},
		{"down", healthpb.HealthCheckResponse_NOT_SERVING, codes.OK},
		{"unknown", 0, codes.NotFound},
	} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: tc.service})
		if status.Code(err) != tc.code {
			t.Fatalf("Check(%s): %v, want %v", tc.service, err, tc.code)
		}
		if tc.code == codes.NotFound && !strings.Contains(status.Convert(err).Message(), "unknown service") {
			t.Errorf("Check(unknown): message %q", status.Convert(err).Message())
		}
		if err == nil && r.Status != tc.want {
			t.Errorf("Check(%s) = %v, want %v", tc.service, r.Status, tc.want)
		}
	}

	// Server streaming: Watch sends the status now and at every change.
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "up"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Recv()
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch message: %v %v", r, err)
	}
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_NOT_SERVING)
	r, err = w.Recv()
	if err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second Watch message: %v %v", r, err)
	}
	if st := te.H2BackendStats(); st.Streams < 4 || st.Connects < 1 {
		t.Errorf("HTTP/2 backend stats %+v: the calls did not go over the shards' backend connections", st)
	}
}
