package fleet

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"ballast/admin"
	"ballast/config"
	"ballast/discovery"
	"ballast/upstream"
)

// Timing and bounds of a node's connection to etcd.
const (
	// ProbeEvery is how often a node checks that etcd answers.
	ProbeEvery = 500 * time.Millisecond
	// probeTimeout bounds one probe; a node that gets no answer in it counts etcd as lost.
	probeTimeout = time.Second
	// startWait bounds the first read of the prefix at start.
	startWait = 3 * time.Second
	// MaxValueBytes bounds one value under the prefix.
	MaxValueBytes = 64 << 10
)

// Options configure a Node.
type Options struct {
	Config config.EtcdFleet
	Logger *slog.Logger
	// TLS is the client configuration when Config.TLS is set (tlsconf builds it).
	TLS *tls.Config
}

// Node is one Ballast's membership of the fleet.
type Node struct {
	cli    *clientv3.Client
	prefix string
	max    int
	log    *slog.Logger
	name   string
	eps    []string
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}

	mu      sync.Mutex
	view    map[string]string // key (under the prefix, without it) → value
	pending map[string]bool   // runtime keys whose backend this node lacks
	applied map[string]string // runtime keys as applied (so a delete undoes only what was done)
	dirty   map[string]bool   // fleet-discovered pools whose keys changed
	pools   map[string]*upstream.Pool
	syncers map[string]*discovery.Syncer
	unsub   []func()
	st      admin.FleetView
}

// Start connects to etcd, reads the prefix (waiting at most startWait: a node whose etcd is
// down starts with the configuration alone and says so) and watches it until Close.
func Start(o Options) (*Node, error) {
	c := o.Config
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints, DialTimeout: 2 * time.Second, TLS: o.TLS,
		Username: c.Username, Password: c.Password,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: time.Second,
		MaxCallRecvMsgSize: c.MaxKeys*(MaxValueBytes+512) + 1<<20,
		Logger:             zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: etcd client: %w", err)
	}
	host, _ := os.Hostname()
	n := &Node{
		cli: cli, prefix: c.Prefix + "/", max: c.MaxKeys, log: o.Logger,
		name: fmt.Sprintf("%s/%d", host, os.Getpid()), eps: c.Endpoints,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
		view: map[string]string{}, pending: map[string]bool{}, applied: map[string]string{}, dirty: map[string]bool{},
	}
	n.st = admin.FleetView{Node: n.name, Endpoints: c.Endpoints, Prefix: c.Prefix, Since: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	first, fcancel := context.WithTimeout(ctx, startWait)
	if err := n.resync(first); err != nil {
		n.disconnected(err)
	} else {
		n.connected()
	}
	fcancel()
	go n.run(ctx)
	return n, nil
}

// Close stops watching and closes the client; the pools keep what was applied.
func (n *Node) Close() {
	n.cancel()
	<-n.done
	n.mu.Lock()
	for _, u := range n.unsub {
		u()
	}
	n.unsub = nil
	n.mu.Unlock()
	_ = n.cli.Close()
}

// SetPools gives the node the pools in force and the Syncers of the pools discovered from the
// fleet (at start and after every reload), and applies the whole view to them.
func (n *Node) SetPools(pools map[string]*upstream.Pool, syncers map[string]*discovery.Syncer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, u := range n.unsub {
		u()
	}
	n.unsub = nil
	n.pools, n.syncers = pools, syncers
	for _, p := range pools {
		// A backend that appears (discovery, API) may have a change waiting; the callback runs
		// under the pool's mutex, so it only signals.
		n.unsub = append(n.unsub, p.Subscribe(func(*upstream.Pool) {
			select {
			case n.kick <- struct{}{}:
			default:
			}
		}))
	}
	for k := range n.applied {
		delete(n.applied, k) // new pools: apply every runtime key again
	}
	n.applyAllLocked()
}

// SetSyncers gives the node the Syncers of a configuration about to be built, so that the
// pools discovered from the fleet are built with their backends (discovery.Syncer.Extend).
func (n *Node) SetSyncers(syncers map[string]*discovery.Syncer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.syncers = syncers
	n.applyFleetPoolsLocked(true)
}

// Status is the node's fleet state.
func (n *Node) Status() admin.FleetView {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.st
	st.Keys = len(n.view)
	return st
}

// FleetStatus is Status, for the admin plane.
func (n *Node) FleetStatus() admin.FleetView { return n.Status() }

// Change writes c under the prefix; every node watching it (this one too) applies it.
func (n *Node) Change(ctx context.Context, c admin.FleetChange) (int64, error) {
	rt := n.prefix + "runtime/" + c.Pool + "/" + c.Backend + "/"
	var (
		err error
		rev int64
	)
	switch c.Action {
	case "drain", "disable":
		var r *clientv3.PutResponse
		r, err = n.cli.Put(ctx, rt+"state", c.Action)
		if r != nil {
			rev = r.Header.Revision
		}
	case "enable":
		var r *clientv3.DeleteResponse
		r, err = n.cli.Delete(ctx, rt+"state")
		if r != nil {
			rev = r.Header.Revision
		}
	case "weight":
		if c.Weight == nil {
			var r *clientv3.DeleteResponse
			r, err = n.cli.Delete(ctx, rt+"weight")
			if r != nil {
				rev = r.Header.Revision
			}
		} else {
			var r *clientv3.PutResponse
			r, err = n.cli.Put(ctx, rt+"weight", strconv.Itoa(*c.Weight))
			if r != nil {
				rev = r.Header.Revision
			}
		}
	case "add":
		b, _ := json.Marshal(backendValue{Address: c.Add.Address, Weight: &c.Add.Weight, Backup: c.Add.Backup, MaxConns: c.Add.MaxConns})
		var r *clientv3.PutResponse
		r, err = n.cli.Put(ctx, n.prefix+"pools/"+c.Pool+"/"+c.Backend, string(b))
		if r != nil {
			rev = r.Header.Revision
		}
	case "remove":
		var r *clientv3.DeleteResponse
		r, err = n.cli.Delete(ctx, n.prefix+"pools/"+c.Pool+"/"+c.Backend)
		if r != nil {
			rev = r.Header.Revision
		}
	default:
		return 0, fmt.Errorf("unknown action %q", c.Action)
	}
	return rev, err
}

// run watches the prefix, probes etcd, and catches up after a loss, until ctx ends.
func (n *Node) run(ctx context.Context) {
	defer close(n.done)
	needResync := !n.Status().Connected
	for ctx.Err() == nil {
		if needResync {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.resync(rctx)
			cancel()
			if err != nil {
				n.disconnected(err)
				n.sleep(ctx, ProbeEvery)
				continue
			}
			n.connected()
			needResync = false
		}
		needResync = n.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		// etcd was lost: wait until it answers, then watch from where the node was.
		for ctx.Err() == nil {
			n.sleep(ctx, ProbeEvery)
			if err := n.probe(ctx); err == nil {
				n.mu.Lock()
				n.st.Reconnects++
				n.mu.Unlock()
				n.connected()
				break
			} else {
				n.disconnected(err)
			}
		}
	}
}

func (n *Node) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (n *Node) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := n.cli.Get(pctx, n.prefix, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd %s did not answer within %s: %w", strings.Join(n.eps, ","), probeTimeout, err)
	}
	return nil
}

// watch follows the prefix from the revision after the last applied one until etcd is lost
// (false) or the revision was compacted away (true: read the prefix again).
func (n *Node) watch(ctx context.Context) (resync bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	n.mu.Lock()
	from := n.st.Revision + 1
	n.mu.Unlock()
	wch := n.cli.Watch(wctx, n.prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	probe := time.NewTicker(ProbeEvery)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-n.kick:
			n.mu.Lock()
			n.applyPendingLocked()
			n.mu.Unlock()
		case <-probe.C:
			if err := n.probe(ctx); err != nil {
				n.disconnected(err)
				return false
			}
		case resp, ok := <-wch:
			if !ok {
				n.disconnected(errors.New("watch closed"))
				return false
			}
			if resp.CompactRevision != 0 {
				n.log.Warn("fleet: etcd compacted past this node's revision; reading the prefix again", "revision", from-1, "compacted", resp.CompactRevision)
				return true
			}
			if err := resp.Err(); err != nil {
				n.disconnected(err)
				return false
			}
			n.mu.Lock()
			for _, ev := range resp.Events {
				k := strings.TrimPrefix(string(ev.Kv.Key), n.prefix)
				if ev.Type == mvccpb.DELETE {
					n.setLocked(k, "", false)
				} else {
					n.setLocked(k, string(ev.Kv.Value), true)
				}
				n.st.Applied++
			}
			if resp.Header.Revision > n.st.Revision {
				n.st.Revision = resp.Header.Revision
			}
			n.applyFleetPoolsLocked(false)
			n.mu.Unlock()
		}
	}
}

// resync reads the whole prefix and applies the difference from the view.
func (n *Node) resync(ctx context.Context) error {
	resp, err := n.cli.Get(ctx, n.prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(n.max)), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return fmt.Errorf("reading %s from etcd %s: %w", n.prefix, strings.Join(n.eps, ","), err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fresh := map[string]string{}
	for _, kv := range resp.Kvs {
		fresh[strings.TrimPrefix(string(kv.Key), n.prefix)] = string(kv.Value)
	}
	if resp.More {
		n.st.KeysRefused += uint64(resp.Count) - uint64(len(resp.Kvs))
		n.log.Warn("fleet: more keys than max_keys; the rest are ignored", "keys", resp.Count, "max_keys", n.max)
	}
	for k := range n.view {
		if _, ok := fresh[k]; !ok {
			n.setLocked(k, "", false)
		}
	}
	for k, v := range fresh {
		if old, ok := n.view[k]; !ok || old != v {
			n.setLocked(k, v, true)
		}
	}
	n.st.Revision = resp.Header.Revision
	n.st.Resyncs++
	n.applyFleetPoolsLocked(false)
	return nil
}

func (n *Node) connected() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.st.Connected {
		n.st.Connected, n.st.Since, n.st.LastError = true, time.Now(), ""
		n.log.Info("fleet: watching etcd", "prefix", n.st.Prefix, "revision", n.st.Revision)
	}
}

func (n *Node) disconnected(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st.Connected || n.st.LastError == "" {
		n.st.Since = time.Now()
		n.log.Warn("fleet: etcd lost; serving the last view", "prefix", n.st.Prefix, "revision", n.st.Revision, "error", err)
	}
	n.st.Connected, n.st.LastError = false, err.Error()
}

// setLocked records one key's new value (present false: deleted) and applies it.
func (n *Node) setLocked(k, v string, present bool) {
	if rest, ok := strings.CutPrefix(k, "pools/"); ok {
		pool, _, _ := strings.Cut(rest, "/")
		n.dirty[pool] = true
	}
	if !present {
		if _, ok := n.view[k]; !ok {
			return
		}
		delete(n.view, k)
		delete(n.pending, k)
		if strings.HasPrefix(k, "runtime/") {
			n.applyRuntimeLocked(k)
		}
		return
	}
	if _, ok := n.view[k]; !ok && len(n.view) >= n.max {
		n.st.KeysRefused++
		return
	}
	if len(v) > MaxValueBytes {
		n.st.KeysRefused++
		return
	}
	n.view[k] = v
	if strings.HasPrefix(k, "runtime/") {
		n.applyRuntimeLocked(k)
	}
}

// runtimeKey splits runtime/<pool>/<backend>/<aspect>.
func runtimeKey(k string) (pool, backend, aspect string, ok bool) {
	rest, ok0 := strings.CutPrefix(k, "runtime/")
	pool, rest, ok1 := strings.Cut(rest, "/")
	i := strings.LastIndexByte(rest, '/')
	if !ok0 || !ok1 || i <= 0 || i == len(rest)-1 || pool == "" {
		return "", "", "", false
	}
	return pool, rest[:i], rest[i+1:], true
}

// applyRuntimeLocked makes one runtime key's value (or its absence) true on this node.
func (n *Node) applyRuntimeLocked(k string) {
	pool, backend, aspect, ok := runtimeKey(k)
	if !ok || (aspect != "state" && aspect != "weight") {
		n.st.KeysRefused++
		return
	}
	v, present := n.view[k]
	p := n.pools[pool]
	var b *upstream.Backend
	if p != nil {
		b = p.Backend(backend)
	}
	if b == nil {
		if present {
			n.pending[k] = true
		}
		delete(n.applied, k)
		return
	}
	delete(n.pending, k)
	prev, had := n.applied[k]
	if present && had && prev == v {
		return
	}
	var err error
	switch aspect {
	case "state":
		switch {
		case !present:
			if had {
				err = p.Enable(backend)
			}
		case v == "drain":
			if b.State() != upstream.StateDraining {
				err = p.Drain(backend)
			}
		case v == "disable":
			if b.State() != upstream.StateDisabled {
				err = p.Disable(backend)
			}
		default:
			err = fmt.Errorf("state %q (valid: drain, disable; delete the key to enable)", v)
		}
	case "weight":
		if !present {
			if had {
				err = p.ResetWeight(backend)
			}
			break
		}
		w, perr := strconv.Atoi(strings.TrimSpace(v))
		if perr == nil {
			perr = config.CheckWeight(w)
		}
		if perr != nil {
			err = fmt.Errorf("weight %q: %v", v, perr)
		} else if !b.WeightOverridden() || b.Weight() != w {
			err = p.SetWeight(backend, w)
		}
	}
	if err != nil {
		n.st.KeysRefused++
		n.log.Warn("fleet: key not applied", "key", n.prefix+k, "error", err)
		delete(n.applied, k)
		return
	}
	if present {
		n.applied[k] = v
	} else {
		delete(n.applied, k)
	}
}

func (n *Node) applyPendingLocked() {
	for k := range n.pending {
		n.applyRuntimeLocked(k)
	}
}

func (n *Node) applyAllLocked() {
	for k := range n.view {
		if strings.HasPrefix(k, "runtime/") {
			n.applyRuntimeLocked(k)
		}
	}
	n.applyFleetPoolsLocked(true)
}

// backendValue is a value under P/pools/<pool>/.
type backendValue struct {
	Address  string `json:"address"`
	Weight   *int   `json:"weight,omitempty"`
	Backup   bool   `json:"backup,omitempty"`
	MaxConns int    `json:"max_conns,omitempty"`
}

func parseBackend(id, v string) (upstream.BackendSpec, error) {
	var bv backendValue
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&bv); err != nil {
			return upstream.BackendSpec{}, fmt.Errorf("not a backend (%v): want {\"address\": \"host:port\", \"weight\": N, \"backup\": bool, \"max_conns\": N} or host:port", err)
		}
	} else {
		bv.Address = v
	}
	b := config.Backend{Address: bv.Address, Name: id, Weight: 1, Backup: bv.Backup, MaxConns: bv.MaxConns}
	if bv.Weight != nil {
		b.Weight = *bv.Weight
	}
	if err := config.CheckBackend(b); err != nil {
		return upstream.BackendSpec{}, err
	}
	return b.Spec(), nil
}

// applyFleetPoolsLocked gives each fleet-discovered pool's Syncer its set from the view.
// Only the pools whose keys changed are given a new set, unless all.
func (n *Node) applyFleetPoolsLocked(all bool) {
	for pool, s := range n.syncers {
		if !all && !n.dirty[pool] {
			continue
		}
		delete(n.dirty, pool)
		pre := "pools/" + pool + "/"
		var keys []string
		for k := range n.view {
			if strings.HasPrefix(k, pre) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var a discovery.Answer
		var bad []string
		for _, k := range keys {
			b, err := parseBackend(strings.TrimPrefix(k, pre), n.view[k])
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s%s: %v", n.prefix, k, err))
				continue
			}
			a.Backends = append(a.Backends, b)
		}
		if len(bad) > 0 {
			n.log.Warn("fleet: backends not applied", "pool", pool, "errors", strings.Join(bad, "; "))
		}
		s.Update(a)
	}
}
