package health

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"ballast/config"
	"ballast/tlsconf"
)

// grpcVia is how a grpc check reaches a pool's backends: its protocol (h2 or h2c) and tls.
// It is comparable, so a reload that changes it restarts the pool's checks.
type grpcVia struct {
	protocol string
	tls      config.BackendTLS
	hasTLS   bool
}

func viaOf(pc config.Pool) grpcVia {
	v := grpcVia{protocol: pc.Protocol}
	if pc.TLS != nil {
		v.tls, v.hasTLS = *pc.TLS, true
	}
	return v
}

// grpcProber calls grpc.health.v1.Health/Check for service on a fresh connection per probe
// (like the HTTP check) and is healthy on SERVING only.
type grpcProber struct {
	service string
	via     grpcVia
}

func newGRPCProber(hc config.HealthCheck, via grpcVia) (Prober, error) {
	if via.hasTLS {
		// Read the files now, so a bad CA or client certificate is reported at start.
		if _, err := tlsconf.Backend(&via.tls, "127.0.0.1:1", []string{tlsconf.ALPNH2}); err != nil {
			return nil, err
		}
	}
	return &grpcProber{service: hc.Service, via: via}, nil
}

func (g *grpcProber) Probe(ctx context.Context, address string) error {
	creds := insecure.NewCredentials()
	if g.via.hasTLS {
		tc, err := tlsconf.Backend(&g.via.tls, address, []string{tlsconf.ALPNH2})
		if err != nil {
			return err
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient("passthrough:///"+address, grpc.WithTransportCredentials(creds), grpc.WithUserAgent("ballast-health-check"))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: g.service})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health: %s", s)
	}
	return nil
}
