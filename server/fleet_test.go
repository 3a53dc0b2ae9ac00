package server

import (
	"fmt"
	"testing"
	"time"

	"ballast/internal/peertest"
	"ballast/internal/testcert"
	"ballast/upstream"
)

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (s *Server) pool(name string) *upstream.Pool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pools[name]
}

// TestFleetTLSAndReload: a server joins a fleet on an etcd that requires TLS client
// certificates (fleet.etcd.tls); a fleet-discovered pool is built with its backends; a reload
// keeps the node, its fleet-discovered backends and the runtime keys applied, and a reload that
// moves the prefix joins the other fleet.
func TestFleetTLSAndReload(t *testing.T) {
	cert, key := testcert.Write(t, t.TempDir(), "etcd", 1)
	e := peertest.StartEtcdTLS(t, cert, key)
	a, b := namedBackend(t, "a"), namedBackend(t, "b")
	e.Ctl("put", "/fleet/one/pools/api/x", b)
	e.Ctl("put", "/fleet/one/runtime/web/"+a+"/weight", "7")
	conf := func(prefix string) string {
		return fmt.Sprintf(`listeners: [{address: "127.0.0.1:0"}]
pools:
  - {name: web, backends: [{address: %s}]}
  - {name: api, discovery: {fleet: true}}
routes: [{path_prefix: /api/, pool: api}, {pool: web}]
fleet: {etcd: {endpoints: [%s], prefix: %s, tls: {ca: %s, cert: %s, key: %s}}}
`, a, e.Endpoint(), prefix, cert, cert, key)
	}
	s, file := startFile(t, conf("/fleet/one"))
	if bk := s.pool("api").Backend("x"); bk == nil || bk.Address != b {
		t.Fatalf("the fleet-discovered pool started without its backend: %v", s.pool("api").Backends())
	}
	waitUntil(t, "the weight key", func() bool { return s.pool("web").Backend(a).Weight() == 7 })
	st := s.fleet.node.Status()
	if !st.Connected || st.Keys != 2 {
		t.Fatalf("fleet over TLS: %+v", st)
	}
	node := s.fleet.node
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.fleet.node != node || s.pool("api").Backend("x") == nil || s.pool("web").Backend(a).Weight() != 7 {
		t.Errorf("after a reload: same node %v, api %v, weight %d", s.fleet.node == node, s.pool("api").Backends(), s.pool("web").Backend(a).Weight())
	}
	e.Ctl("put", "/fleet/one/runtime/web/"+a+"/state", "drain")
	waitUntil(t, "a drain after the reload", func() bool { return s.pool("web").Backend(a).State() == upstream.StateDraining })

	e.Ctl("put", "/fleet/two/pools/api/y", a)
	writeFile(t, file, conf("/fleet/two"))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.fleet.node == node || s.pool("api").Backend("y") == nil {
		t.Errorf("after moving the prefix: new node %v, api %v", s.fleet.node != node, s.pool("api").Backends())
	}
}
