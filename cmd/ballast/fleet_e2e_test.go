package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ballast/admin"
	"ballast/internal/peertest"
)

// fleetNode is one ballast process of the fleet test.
type fleetNode struct {
	p     *e2eProc
	admin string
	web   string
}

func backendOf(r admin.PoolsResponse, pool, id string) (admin.BackendView, bool) {
	for _, p := range r.Pools {
		if p.Name == pool {
			for _, b := range p.Backends {
				if b.ID == id {
					return b, true
				}
			}
		}
	}
	return admin.BackendView{}, false
}

// TestServeFleetEtcd: three ballast processes share a real etcd prefix. A drain made on one
// node (ctl --fleet, the API with ?fleet=1) and writes made with etcdctl reach all three; the
// time from a change to the last node applying it is measured over 50 changes while HTTP load
// runs through every node, with no request failing. etcd is stopped in the middle: every node
// keeps serving its last view and says it is disconnected (API, /metrics, ctl status); a change
// written right after etcd comes back is caught up from each node's revision.
func TestServeFleetEtcd(t *testing.T) {
	e := peertest.StartEtcd(t)
	const prefix = "/ballast/e2e"
	var ids []string
	for i := range 3 {
		ids = append(ids, e2eNewBackend(t, fmt.Sprintf("b%d", i)).addr())
	}
	api := e2eNewBackend(t, "api0").addr()
	e.Ctl("put", prefix+"/pools/api/api0", fmt.Sprintf(`{"address": %q, "weight": 2}`, api))

	var nodes []*fleetNode
	for range 3 {
		file := filepath.Join(t.TempDir(), "ballast.yaml")
		e2eWriteFile(t, file, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0"}]
pools:
  - name: web
    backends: [{address: %s}, {address: %s}, {address: %s}]
  - name: api
    discovery: {fleet: true}
routes:
  - {path_prefix: /api/, pool: api}
  - {pool: web}
admin: {address: "127.0.0.1:0"}
fleet: {etcd: {endpoints: [%s], prefix: %s}}
`, ids[0], ids[1], ids[2], e.Addr, prefix))
		p := e2eStart(t, "serve", "-c", file)
		ls := e2eListeners(p)
		m, _ := p.waitLine(true, 0, e2eAdminRE)
		nodes = append(nodes, &fleetNode{p: p, admin: m[1], web: "http://" + ls["http"][0]})
	}
	for i, n := range nodes {
		r := adminPools(t, n.admin)
		if b, ok := backendOf(r, "api", "api0"); !ok || b.Weight != 2 || r.Fleet == nil || !r.Fleet.Connected {
			t.Fatalf("node %d at start: api0 %+v, fleet %+v", i, b, r.Fleet)
		}
	}

	// Load through every node, both pools.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loads []*planeLoad
	client := &http.Client{Timeout: e2eWait, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	for i, n := range nodes {
		for _, path := range []string{"/", "/api/x"} {
			l := &planeLoad{name: fmt.Sprintf("node%d%s", i, path)}
			loads = append(loads, l)
			l.run(stop, &wg, httpOnce(client, n.web+path, 1))
		}
	}

	// waitAll polls every node until cond holds on it and returns when the last one did.
	waitAll := func(what string, cond func(admin.PoolsResponse) bool) {
		t.Helper()
		var inner sync.WaitGroup
		for i, n := range nodes {
			inner.Go(func() {
				for deadline := time.Now().Add(e2eWait); ; time.Sleep(5 * time.Millisecond) {
					if cond(adminPools(t, n.admin)) {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("node %d: timed out waiting for %s", i, what)
						return
					}
				}
			})
		}
		inner.Wait()
	}
	state := func(id, want string) func(admin.PoolsResponse) bool {
		return func(r admin.PoolsResponse) bool { b, ok := backendOf(r, "web", id); return ok && b.State == want }
	}
	weight := func(id string, want int, overridden bool) func(admin.PoolsResponse) bool {
		return func(r admin.PoolsResponse) bool {
			b, ok := backendOf(r, "web", id)
			return ok && b.Weight == want && b.WeightOverridden == overridden
		}
	}

	var took []time.Duration
	change := func(i int) {
		k := (i / 2) % 3
		id := ids[k]
		drain := i%2 == 0
		start := time.Now()
		switch i % 3 {
		case 0: // ctl --fleet on one node
			act := "enable"
			if drain {
				act = "drain"
			}
			if out, code := e2eRun(t, "ctl", "--admin", nodes[i%3].admin, "--fleet", act, "web", id); code != 0 || !strings.Contains(out, "ok: fleet "+act) {
				t.Fatalf("ctl --fleet %s: exit %d: %s", act, code, out)
			}
		case 1: // the API with ?fleet=1
			act := "enable"
			if drain {
				act = "drain"
			}
			c := admin.NewClient(nodes[i%3].admin, "")
			c.Fleet = true
			if _, err := c.Action(t.Context(), "web", id, act); err != nil {
				t.Fatalf("API %s ?fleet=1: %v", act, err)
			}
		case 2: // etcdctl
			if drain {
				e.Ctl("put", prefix+"/runtime/web/"+id+"/state", "drain")
			} else {
				e.Ctl("del", prefix+"/runtime/web/"+id+"/state")
			}
		}
		want := "up"
		if drain {
			want = "draining"
		}
		waitAll(fmt.Sprintf("change %d (%s %s)", i, want, id), state(id, want))
		took = append(took, time.Since(start))
	}

	for i := range 25 {
		change(i)
	}
	// A weight through etcdctl, and its reset.
	e.Ctl("put", prefix+"/runtime/web/"+ids[2]+"/weight", "5")
	waitAll("weight 5", weight(ids[2], 5, true))
	e.Ctl("del", prefix+"/runtime/web/"+ids[2]+"/weight")
	waitAll("the weight reset", weight(ids[2], 1, false))

	// etcd goes away: every node serves its last view and says so.
	e.Ctl("put", prefix+"/runtime/web/"+ids[0]+"/state", "drain")
	waitAll("the drain before the loss", state(ids[0], "draining"))
	lost := time.Now()
	e.Stop()
	waitAll("the nodes to see etcd lost", func(r admin.PoolsResponse) bool { return r.Fleet != nil && !r.Fleet.Connected })
	t.Logf("etcd stopped: every node said so within %s", time.Since(lost))
	for i, n := range nodes {
		r := adminPools(t, n.admin)
		if b, _ := backendOf(r, "web", ids[0]); b.State != "draining" || r.Fleet.LastError == "" || r.Fleet.Since.Before(lost) {
			t.Errorf("node %d without etcd: %s is %s, fleet %+v", i, ids[0], b.State, r.Fleet)
		}
		if m := adminBody(t, n.admin+"/metrics"); !strings.Contains(m, `ballast_fleet_connected{prefix="`+prefix+`"} 0`) {
			t.Errorf("node %d /metrics lacks ballast_fleet_connected 0", i)
		}
		if out, _ := e2eRun(t, "ctl", "--admin", n.admin, "status"); !strings.Contains(out, "DISCONNECTED since") || !strings.Contains(out, "serving its last view") {
			t.Errorf("node %d ctl status:\n%s", i, out)
		}
	}
	if out, code := e2eRun(t, "ctl", "--admin", nodes[1].admin, "--fleet", "enable", "web", ids[0]); code == 0 || !strings.Contains(out, "503") {
		t.Errorf("a fleet change without etcd: exit %d: %s", code, out)
	}
	revs := map[int]int64{}
	for i, n := range nodes {
		revs[i] = adminPools(t, n.admin).Fleet.Revision
	}
	e.Restart()
	// Written before the nodes' next probe: they catch up from the revision they had.
	e.Ctl("del", prefix+"/runtime/web/"+ids[0]+"/state")
	e.Ctl("put", prefix+"/runtime/web/"+ids[1]+"/weight", "4")
	waitAll("the changes made while away", func(r admin.PoolsResponse) bool {
		return state(ids[0], "up")(r) && weight(ids[1], 4, true)(r) && r.Fleet.Connected
	})
	for i, n := range nodes {
		f := adminPools(t, n.admin).Fleet
		if f.Reconnects < 1 || f.Resyncs != 1 || f.Revision < revs[i]+2 {
			t.Errorf("node %d after etcd came back: %+v (had revision %d)", i, f, revs[i])
		}
	}
	e.Ctl("del", prefix+"/runtime/web/"+ids[1]+"/weight")
	waitAll("the weight reset", weight(ids[1], 1, false))

	// Membership of the fleet-discovered pool, through ctl --fleet on one node.
	api1 := e2eNewBackend(t, "api1").addr()
	if out, code := e2eRun(t, "ctl", "--admin", nodes[2].admin, "--fleet", "add", "api", api1, "--name", "api1", "--weight", "3"); code != 0 || !strings.Contains(out, "ok: fleet add api1") {
		t.Fatalf("ctl --fleet add: exit %d: %s", code, out)
	}
	waitAll("api1 on every node", func(r admin.PoolsResponse) bool {
		b, ok := backendOf(r, "api", "api1")
		return ok && b.Address == api1 && b.Weight == 3
	})
	if out, code := e2eRun(t, "ctl", "--admin", nodes[0].admin, "--fleet", "remove", "api", "api1"); code != 0 || !strings.Contains(out, "ok: fleet remove api1") {
		t.Fatalf("ctl --fleet remove: exit %d: %s", code, out)
	}
	waitAll("api1 to leave every node", func(r admin.PoolsResponse) bool { _, ok := backendOf(r, "api", "api1"); return !ok })

	for i := 25; i < 50; i++ {
		change(i)
	}
	close(stop)
	wg.Wait()

	for _, l := range loads {
		if l.failed.Load() != 0 {
			t.Errorf("%s: %d of %d requests failed: %v", l.name, l.failed.Load(), l.ok.Load()+l.failed.Load(), l.errs)
		}
		if l.ok.Load() == 0 {
			t.Errorf("%s: no request went through", l.name)
		}
	}
	var total int64
	for _, l := range loads {
		total += l.ok.Load()
	}
	slices.Sort(took)
	over := 0
	for _, d := range took {
		if d > time.Second {
			over++
		}
	}
	q := func(f float64) time.Duration { return took[int(f*float64(len(took)-1))] }
	t.Logf("%d fleet changes applied on all 3 nodes; change to the last node applying it: min %s, median %s, p90 %s, max %s; %d over 1s; %d requests through the nodes, 0 failed",
		len(took), q(0), q(0.5), q(0.9), q(1), over, total)
	for i, n := range nodes {
		f := adminPools(t, n.admin).Fleet
		if f.Applied < 50 {
			t.Errorf("node %d applied %d changes, want at least 50", i, f.Applied)
		}
	}
}
