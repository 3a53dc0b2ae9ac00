// Package admin is Ballast's operations plane: the runtime API, the status page, the
// Prometheus metrics, and the health monitor that feeds them.
//
// A Plane is created once per process. Install gives it the running configuration and pools
// (again after every reload; pools are looked up by name on every request, so the API always
// acts on the pools in force). When admin.address is set, the first Install binds the admin
// listener (net/http); a reload cannot move it.
//
// API (JSON): GET /api/pools lists every pool and backend with live state; POST
// /api/pools/{pool}/backends/{id}/{weight|drain|disable|enable|remove}, POST
// /api/pools/{pool}/backends (add) and DELETE /api/pools/{pool}/backends/{id} change them at
// once, without a reload. Those changes are runtime overrides: GET reports them, and a reload
// keeps weight, drain and disable overrides while the configuration decides membership.
//
// Changes are authorised as follows. With a token configured, every change needs
// "Authorization: Bearer TOKEN". Without one (allowed only on a loopback-only listener), a
// change must name a loopback Host (no DNS rebinding) and either carry the page's per-session
// nonce (X-Ballast-Nonce, an HMAC of the session cookie) or be a JSON request without a
// foreign Origin, which a cross-site form cannot forge. Cross-site fetches (Sec-Fetch-Site)
// are always refused. Reads are open to whoever can reach the listener.
//
// GET / is the status page (embedded assets, no CDN), polling the API every second. GET
// /metrics is the Prometheus exposition from a custom registry, every name prefixed ballast_.
//
// # Concurrency
//
// Every method of Plane is safe for concurrent use. The pools are published through an atomic
// pointer; the HTTP handlers read live counters without locks. The latency histograms are fed
// from upstream's release observer on the request path: one map lookup and one atomic add.
package admin
