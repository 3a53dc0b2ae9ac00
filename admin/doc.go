// Package admin is Ballast's operations plane: the runtime API, the status page and the
// Prometheus metrics.
//
// A Plane is created once per server (package server), which owns the health monitor the
// plane reads (Watch; HealthOptions feed the metrics), gives it the data planes' own counters
// (Count for responses, retries and hedges; CountListeners for per-listener counters;
// CountConns for the L4 planes' per-backend connections and bytes) and makes it each pool's release observer (ObserveRelease). Install gives it the
// running configuration and pools (again after every reload; pools are looked up by name on
// every request, so the API always acts on the pools in force). When admin.address is set, the
// first Install binds the admin listener (net/http); a reload cannot move it, and Check (which
// Install applies, and the server before anything else in a reload) refuses a configuration
// that would leave a listener other hosts can reach without a token. An added backend passes
// the configuration file's own rules (config.CheckBackend).
//
// API (JSON): GET /api/pools lists every pool and backend with live state (pools behind tcp or
// udp listeners say protocol "l4" and carry conns per backend) and every listener's counters; POST
// /api/pools/{pool}/backends/{id}/{weight|drain|disable|enable|remove}, POST
// /api/pools/{pool}/backends (add) and DELETE /api/pools/{pool}/backends/{id} change them at
// once, without a reload. Those changes are runtime overrides: GET reports them, and a reload
// keeps weight, drain and disable overrides while the configuration decides membership.
//
// Changes are authorised as follows. With a token configured, every change needs
// "Authorization: Bearer TOKEN". Without one (allowed only on a loopback-only listener), a
// change must come from a loopback peer address (decided by the connection, never by a header),
// name a loopback Host (no DNS rebinding) and either carry the page's per-session
// nonce (X-Ballast-Nonce, an HMAC of the session cookie) or be a JSON request without a
// foreign Origin, which a cross-site form cannot forge. Cross-site fetches (Sec-Fetch-Site)
// are always refused. Reads (GET /api/pools, /metrics) need admin.token or admin.read_token
// when admin.reads is token (the default on a listener other hosts can reach; guard.go), and
// are open otherwise. No backend may be the admin listener or a listener of the process
// (SetSelf gives the server's bound listeners), in a file or through the API; an added
// backend's body is one JSON object.
//
// Advice (observe.go): every pool's last 4096 releases (backend, time, latency, outcome) are
// kept in a ring written without locks; GET /api/pools/{pool}/observed turns them into an
// advise.Observation (?releases=1 adds the raw records), and GET /api/pools/{pool}/advice
// (?objective=, ?runs=) replays it through the simulator in this process, one computation at
// a time (others get 503 meanwhile) and cached for 10 s; the page's advice panel shows it.
//
// GET / is the status page (embedded assets, no CDN), polling the API every second. GET
// /metrics is the Prometheus exposition from a custom registry, every name prefixed ballast_.
//
// XDP directors (director.go): the server's director plane implements Directors and is given
// with ShowDirectors; GET /api/pools lists its directors under "directors" (per VIP and per real
// server: state, weight, packets, bytes, new and active flows), the page and `ballast ctl status`
// show them, and /metrics exports them as ballast_director_*, all read from the BPF maps at the
// request.
//
// # Concurrency
//
// Every method of Plane is safe for concurrent use, except Watch and ShowDirectors, which come before Install
// (the server calls it once, at start). The pools are published through an atomic
// pointer; the HTTP handlers read live counters without locks. The latency histograms are fed
// from each pool's release observer on the request path: one map lookup and one atomic add.
package admin
