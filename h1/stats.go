package h1

// Stats are the engine's counters, summed over its shards (Engine.Stats): gauges of what is
// open now, and totals since the engine started. Package admin shows every field on /metrics
// (ballast_http1_*). Off Linux the engine does not run and its Stats are zero.
type Stats struct {
	Conns, Accepted, Requests int64 // open client connections; accepted; requests read
	Refused                   int64 // request heads answered 4xx/5xx by the engine's checks
	ConnsRefused              int64 // connections closed at accept for max_conns_per_client
	HeaderTimeouts            int64 // connections closed for read_header_timeout
	IdleTimeouts              int64 // idle keep-alive connections closed for idle_timeout
	BodyTimeouts              int64 // requests whose body was too slow (408)
	WriteTimeouts             int64 // clients that did not read their response for idle_timeout
	TLSFailures               int64 // TLS handshakes that failed or timed out (read_header_timeout)
	TLSRefused                int64 // connections closed at accept: maxHandshakes were in progress
	BackendConns              int64 // open backend connections (in use or idle)
	BackendTLS                int64 // backend TLS handshakes completed (backendtls.go)
	BackendTLSResumed         int64 // of which resumed a session the backend had given
	BackendTLSFailures        int64 // backend handshakes that failed (verification) or timed out (timeouts.connect)
	BackendTLSRefused         int64 // backend connections failed: maxBackendHandshakes were in progress
	Connects, ConnectFailures int64
	Active                    int64 // requests in flight (reading the body up to the response's end)
	Queued                    int64 // requests that waited in a backlog
	Tunnels                   int64 // open Upgrade tunnels
	AcceptFailures            int64 // accepts refused for want of descriptors
	LogDropped                int64 // access-log lines lost to a writer that fell behind
	Compressed                int64 // responses compressed
	CompressDeclined          int64 // responses sent as they are: maxEncoders were in use
	Encoders                  int64 // encoders in use (responses being compressed)
}
