// Package fleet shares runtime changes between Ballast nodes through etcd: every node watches
// one key prefix, applies what is written under it to its own pools through upstream's runtime
// changes, and writes there the changes an operator asks the fleet to make (ballast ctl --fleet,
// the admin API with ?fleet=1). Any tool that writes the keys (etcdctl) changes the fleet too.
//
// # Keys
//
// Under the prefix P (fleet.etcd.prefix):
//
//	P/runtime/<pool>/<backend>/state   "drain" or "disable"; deleting the key enables the backend
//	P/runtime/<pool>/<backend>/weight  a weight 0..10000; deleting the key resets it
//	P/pools/<pool>/<backend>           a backend of a pool with discovery: {fleet: true}:
//	                                   {"address": "10.0.0.1:80", "weight": 1, "backup": false,
//	                                   "max_conns": 0}, or just "10.0.0.1:80"
//
// A backend name may contain "/": the pool is the first segment, the aspect the last. A key or
// value that does not parse is ignored and counted, as are keys beyond max_keys and values over
// MaxValueBytes.
//
// # Connection
//
// A node reads the whole prefix at start (bounded by max_keys), then watches it from the
// revision it read. A probe every ProbeEvery tells a lost etcd: the node keeps serving its last
// view, says since when it is disconnected, and when etcd answers again watches from the
// revision after the last one it applied, so it misses nothing; if etcd compacted that revision
// away, it reads the whole prefix again and applies the difference.
//
// A runtime change to a backend this node does not have (yet) is kept and applied when the
// backend appears (a discovery source added it, a reload listed it).
//
// # Concurrency
//
// One goroutine watches and applies; Change and Status are safe for concurrent use. The node's
// mutex is taken before a discovery Syncer's and a pool's, never under them.
package fleet
