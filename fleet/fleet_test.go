package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ballast/admin"
	"ballast/config"
	"ballast/discovery"
	"ballast/internal/peertest"
	"ballast/upstream"
)

func testPool(t *testing.T, name string, ids ...string) *upstream.Pool {
	t.Helper()
	var bs []upstream.BackendSpec
	for _, id := range ids {
		bs = append(bs, upstream.BackendSpec{ID: id, Address: id, Weight: 1})
	}
	p, err := upstream.NewPool(upstream.Spec{Name: name, Balancer: "roundrobin", Backends: bs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func startNode(t *testing.T, e *peertest.Etcd, maxKeys int) *Node {
	t.Helper()
	n, err := Start(Options{Config: config.EtcdFleet{Endpoints: []string{e.Addr}, Prefix: "/ballast/test", MaxKeys: maxKeys}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for end := start.Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	return time.Since(start)
}

// TestFleetRuntimeKeys: etcdctl writes under the prefix drain, disable and weight backends on a
// node; deleting the keys undoes them; a key for a backend the node lacks waits for it; keys
// that do not parse are refused and counted.
func TestFleetRuntimeKeys(t *testing.T) {
	e := peertest.StartEtcd(t)
	n := startNode(t, e, 100)
	p := testPool(t, "web", "a:1", "b:1")
	n.SetPools(map[string]*upstream.Pool{"web": p}, nil)
	if st := n.Status(); !st.Connected || st.Resyncs != 1 {
		t.Fatalf("status %+v", st)
	}
	a, b := p.Backend("a:1"), p.Backend("b:1")
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "drain")
	e.Ctl("put", "/ballast/test/runtime/web/b:1/weight", "7")
	waitFor(t, "the drain and the weight", func() bool { return a.State() == upstream.StateDraining && b.Weight() == 7 })
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "disable")
	waitFor(t, "the disable", func() bool { return a.State() == upstream.StateDisabled })
	e.Ctl("del", "/ballast/test/runtime/web/a:1/state")
	e.Ctl("del", "/ballast/test/runtime/web/b:1/weight")
	waitFor(t, "the undo", func() bool { return a.State() == upstream.StateUp && b.Weight() == 1 && !b.WeightOverridden() })

	refused := n.Status().KeysRefused
	e.Ctl("put", "/ballast/test/runtime/web/b:1/state", "sleep")
	e.Ctl("put", "/ballast/test/runtime/web/b:1/weight", "100000")
	e.Ctl("put", "/ballast/test/runtime/web/b:1/colour", "red")
	waitFor(t, "the bad keys to be refused", func() bool { return n.Status().KeysRefused >= refused+3 })
	if b.State() != upstream.StateUp || b.Weight() != 1 {
		t.Errorf("bad keys changed b: %s weight %d", b.State(), b.Weight())
	}

	// A change for a backend that comes later (a discovery source, the API) waits for it.
	e.Ctl("put", "/ballast/test/runtime/web/c:1/state", "drain")
	time.Sleep(100 * time.Millisecond)
	c, err := p.Add(upstream.BackendSpec{ID: "c:1", Address: "c:1", Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiting drain", func() bool { return c.State() == upstream.StateDraining })

	// Change writes the same keys; the node applies its own change from the watch.
	w := 3
	if _, err := n.Change(context.Background(), admin.FleetChange{Pool: "web", Backend: "a:1", Action: "weight", Weight: &w}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the weight written through Change", func() bool { return a.Weight() == 3 })
	if out := e.Ctl("get", "/ballast/test/runtime/web/a:1/weight", "--print-value-only"); strings.TrimSpace(out) != "3" {
		t.Errorf("etcd holds %q", out)
	}
}

// TestFleetDiscoveredPool: keys under P/pools/<pool>/ are the backends of a pool discovered
// from the fleet, with the discovery rules (a deleted key drains the backend).
func TestFleetDiscoveredPool(t *testing.T) {
	e := peertest.StartEtcd(t)
	e.Ctl("put", "/ballast/test/pools/api/one", `{"address": "127.0.0.1:9001", "weight": 2}`)
	n := startNode(t, e, 100)
	s := discovery.NewSyncer("api", "fleet", 10, nil)
	n.SetSyncers(map[string]*discovery.Syncer{"api": s})
	p, err := upstream.NewPool(upstream.Spec{Name: "api", Balancer: "roundrobin", Backends: s.Extend(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s.SetPool(p)
	n.SetPools(map[string]*upstream.Pool{"api": p}, map[string]*discovery.Syncer{"api": s})
	if b := p.Backend("one"); b == nil || b.Weight() != 2 || b.Address != "127.0.0.1:9001" {
		t.Fatalf("the pool was built without the fleet's backend: %v", p.Backends())
	}
	e.Ctl("put", "/ballast/test/pools/api/two", "127.0.0.1:9002")
	waitFor(t, "the second backend", func() bool { return p.Backend("two") != nil })
	e.Ctl("del", "/ballast/test/pools/api/one")
	waitFor(t, "the first to drain", func() bool { b := p.Backend("one"); return b != nil && b.State() == upstream.StateDraining })
	e.Ctl("put", "/ballast/test/pools/api/bad", `{"adress": "x"}`)
	time.Sleep(200 * time.Millisecond)
	if p.Backend("bad") != nil {
		t.Error("a value that does not parse became a backend")
	}
}

// TestFleetReconnect: with etcd stopped the node keeps its view and says so; a change made
// while it was away (written right after etcd restarts, before the node reconnects) is applied
// from the revision it had.
func TestFleetReconnect(t *testing.T) {
	e := peertest.StartEtcd(t)
	n := startNode(t, e, 100)
	p := testPool(t, "web", "a:1", "b:1")
	n.SetPools(map[string]*upstream.Pool{"web": p}, nil)
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "drain")
	waitFor(t, "the drain", func() bool { return p.Backend("a:1").State() == upstream.StateDraining })
	rev := n.Status().Revision
	e.Stop()
	took := waitFor(t, "the node to say etcd is lost", func() bool { return !n.Status().Connected })
	st := n.Status()
	if st.LastError == "" || st.Revision != rev || p.Backend("a:1").State() != upstream.StateDraining {
		t.Errorf("while etcd is down: %+v, a:1 %s", st, p.Backend("a:1").State())
	}
	t.Logf("etcd loss seen in %s: %s", took, st.LastError)
	e.Restart()
	e.Ctl("put", "/ballast/test/runtime/web/b:1/state", "disable")
	e.Ctl("del", "/ballast/test/runtime/web/a:1/state")
	waitFor(t, "the missed changes", func() bool {
		return p.Backend("b:1").State() == upstream.StateDisabled && p.Backend("a:1").State() == upstream.StateUp
	})
	st = n.Status()
	if !st.Connected || st.Reconnects < 1 || st.Resyncs != 1 || st.Revision <= rev {
		t.Errorf("after the restart: %+v (want connected, a reconnect without a full read, a later revision)", st)
	}
}

// TestFleetKeyFlood: a prefix flooded with more keys than max_keys holds max_keys and counts
// the rest, at start and from the watch.
func TestFleetKeyFlood(t *testing.T) {
	e := peertest.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(from, to int) {
		for i := from; i < to; i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, to); j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("/ballast/test/runtime/web/x%05d:1/state", j), "drain"))
			}
			if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 300)
	n := startNode(t, e, 50)
	if st := n.Status(); st.Keys != 50 || st.KeysRefused != 250 {
		t.Errorf("after the start: %d keys, %d refused; want 50 and 250", st.Keys, st.KeysRefused)
	}
	put(300, 600)
	waitFor(t, "the watched flood to be refused", func() bool { return n.Status().KeysRefused >= 550 })
	if st := n.Status(); st.Keys != 50 {
		t.Errorf("after the watched flood: %d keys", st.Keys)
	}
	if _, err := cli.Delete(context.Background(), "/ballast/test/runtime/web/x00000:1/state"); err != nil {
		t.Fatal(err)
	}
	refused := n.Status().KeysRefused
	if _, err := cli.Put(context.Background(), "/ballast/test/runtime/web/big:1/state", strings.Repeat("x", MaxValueBytes+1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a value over MaxValueBytes to be refused", func() bool { return n.Status().KeysRefused == refused+1 })
	if st := n.Status(); st.Keys != 49 {
		t.Errorf("after a delete and an oversized value: %d keys, want 49", st.Keys)
	}
}

// TestFleetStartWithoutEtcd: a node whose etcd is down starts (within the first read's bound)
// from its configuration, says it is disconnected, and applies the prefix once etcd answers.
func TestFleetStartWithoutEtcd(t *testing.T) {
	e := peertest.StartEtcd(t)
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "drain")
	e.Stop()
	start := time.Now()
	n := startNode(t, e, 100)
	st := n.Status()
	if st.Connected || !strings.Contains(st.LastError, "reading /ballast/test/ from etcd "+e.Addr) || time.Since(start) > startWait+2*time.Second {
		t.Errorf("started without etcd in %s: %+v", time.Since(start), st)
	}
	p := testPool(t, "web", "a:1")
	n.SetPools(map[string]*upstream.Pool{"web": p}, nil)
	if p.Backend("a:1").State() != upstream.StateUp {
		t.Fatal("a change applied before etcd was read")
	}
	e.Restart()
	waitFor(t, "the prefix once etcd is back", func() bool { return p.Backend("a:1").State() == upstream.StateDraining })
	if st := n.Status(); !st.Connected || st.Resyncs != 1 {
		t.Errorf("after etcd came: %+v", st)
	}
}

// TestFleetCompacted: a node whose revision etcd compacted away reads the whole prefix again
// when it reconnects (its watch from that revision is refused), then follows the changes.
func TestFleetCompacted(t *testing.T) {
	e := peertest.StartEtcd(t)
	n := startNode(t, e, 100)
	p := testPool(t, "web", "a:1", "b:1")
	n.SetPools(map[string]*upstream.Pool{"web": p}, nil)
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "drain")
	waitFor(t, "the drain", func() bool { return p.Backend("a:1").State() == upstream.StateDraining })
	e.Ctl("put", "/ballast/test/runtime/web/b:1/weight", "9")
	e.Ctl("del", "/ballast/test/runtime/web/a:1/state")
	out := e.Ctl("put", "/ballast/test/other", "x", "-w", "fields")
	rev := ""
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, `"Revision" : `); ok {
			rev = strings.TrimSpace(v)
		}
	}
	if rev == "" {
		t.Fatalf("no revision in %q", out)
	}
	e.Ctl("compact", rev)
	// The node missed the last changes: it is taken back to a revision before them.
	e.Stop()
	waitFor(t, "the node to see etcd lost", func() bool { return !n.Status().Connected })
	n.mu.Lock()
	n.st.Revision = 2
	n.mu.Unlock()
	e.Restart()
	e.Ctl("put", "/ballast/test/runtime/web/a:1/state", "disable")
	waitFor(t, "the full read after the compaction", func() bool { return n.Status().Resyncs == 2 })
	waitFor(t, "the latest state", func() bool {
		return p.Backend("a:1").State() == upstream.StateDisabled && p.Backend("b:1").Weight() == 9
	})
}
