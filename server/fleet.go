package server

import (
	"fmt"
	"reflect"
	"strings"

	"ballast/config"
	"ballast/fleet"
	"ballast/tlsconf"
	"ballast/upstream"
)

// fleetState is the node's fleet (package fleet), when the configuration has one.
type fleetState struct {
	node *fleet.Node
	conf *config.EtcdFleet // what node was started with
}

// fleetPrepare starts the fleet, or starts it again when its configuration changed, and gives
// it the Syncers of the pools it discovers, so that they are built with their backends.
func (s *Server) fleetPrepare(cfg *config.Config) error {
	var want *config.EtcdFleet
	if cfg.Fleet != nil {
		want = cfg.Fleet.Etcd
	}
	if s.fleet.node != nil && (want == nil || !reflect.DeepEqual(*want, *s.fleet.conf)) {
		s.fleet.node.Close()
		s.ops.ShowFleet(nil)
		s.fleet = fleetState{}
	}
	if want != nil && s.fleet.node == nil {
		o := fleet.Options{Config: *want, Logger: s.logger}
		if want.TLS != nil {
			host := want.Endpoints[0]
			if _, rest, ok := strings.Cut(host, "://"); ok {
				host = rest
			}
			tc, err := tlsconf.Backend(want.TLS, host, nil)
			if err != nil {
				return fmt.Errorf("fleet.etcd.tls: %w", err)
			}
			o.TLS = tc
		}
		n, err := fleet.Start(o)
		if err != nil {
			return err
		}
		c := *want
		s.fleet = fleetState{node: n, conf: &c}
		s.ops.ShowFleet(n)
	}
	if s.fleet.node != nil {
		s.fleet.node.SetSyncers(s.disc.fleetSyncers(true))
	}
	return nil
}

// fleetInstall gives the fleet the pools in force.
func (s *Server) fleetInstall(pools map[string]*upstream.Pool) {
	if s.fleet.node != nil {
		s.fleet.node.SetPools(pools, s.disc.fleetSyncers(false))
	}
}

// fleetClose leaves the fleet (shutdown).
func (s *Server) fleetClose() {
	if s.fleet.node != nil {
		s.fleet.node.Close()
		s.fleet = fleetState{}
	}
}

// undoPrepare drops what prepare made for a configuration that is not installed: the
// discovery sources it started and the fleet's view of them.
func (s *Server) undoPrepare() {
	s.disc.abort()
	s.fleetInstall(s.pools)
}
