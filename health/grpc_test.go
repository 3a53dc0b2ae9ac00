package health

import (
	"ballast/internal/refused"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	ghealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"ballast/config"
	"ballast/upstream"
)

// A grpc check asks grpc.health.v1 about the configured service: SERVING is healthy,
// NOT_SERVING, an unknown service and no server are not.
func TestGRPCProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := ghealth.NewServer()
	hs.SetServingStatus("echo.Echo", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down.Down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	deadAddr := refused.TCP(t)

	cases := []struct {
		name, service, addr string
		ok                  bool
		why                 string
	}{
		{"whole server", "", ln.Addr().String(), true, ""},
		{"serving service", "echo.Echo", ln.Addr().String(), true, ""},
		{"not serving", "down.Down", ln.Addr().String(), false, "NOT_SERVING"},
		{"unknown service", "nope.Nope", ln.Addr().String(), false, "NotFound"},
		{"no server", "", deadAddr, false, "Unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := newGRPCProber(config.HealthCheck{Type: "grpc", Service: tc.service}, grpcVia{protocol: config.BackendH2C})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err = pr.Probe(ctx, tc.addr)
			if (err == nil) != tc.ok {
				t.Fatalf("Probe = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Probe = %v, want it to mention %q", err, tc.why)
			}
		})
	}
}

// A pool with health_check type grpc: the monitor marks the backend down when its service
// stops SERVING and up again when it serves.
func TestMonitorGRPCCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := ghealth.NewServer()
	hs.SetServingStatus("echo.Echo", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	pc := config.Pool{Name: "g", Balancer: "roundrobin", Protocol: config.BackendH2C,
		Backends: []config.Backend{{Name: "a", Address: ln.Addr().String(), Weight: 1}},
		Health: config.HealthCheck{Type: "grpc", Service: "echo.Echo",
			Interval: config.Duration{Duration: 20 * time.Millisecond}, Timeout: config.Duration{Duration: time.Second}, Rise: 1, Fall: 1}}
	p, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	events := make(chan Event, 16)
	m := New(context.Background(), Options{OnEvent: func(e Event) { events <- e }})
	t.Cleanup(m.Close)
	m.Update(map[string]*upstream.Pool{"g": p}, []config.Pool{pc})
	hs.SetServingStatus("echo.Echo", healthpb.HealthCheckResponse_NOT_SERVING)
	waitEvent(t, events, "a", Down)
	hs.SetServingStatus("echo.Echo", healthpb.HealthCheckResponse_SERVING)
	waitEvent(t, events, "a", Up)
	if !p.Backend("a").Healthy() {
		t.Fatal("after the up event the backend is not healthy")
	}
}
