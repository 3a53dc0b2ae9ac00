package config

import "time"

// Config is a whole Ballast configuration file, after defaults are applied.
type Config struct {
	Listeners []Listener `yaml:"listeners"`
	Routes    []Route    `yaml:"routes"`
	Pools     []Pool     `yaml:"pools"`
	Admin     Admin      `yaml:"admin"`
	Logging   Logging    `yaml:"logging"`
	// Traffic policy shared by listeners and routes: see policy.go.
	TrustedProxies []string    `yaml:"trusted_proxies,omitempty"`
	ErrorPages     []ErrorPage `yaml:"error_pages,omitempty"`
	// Fleet shares runtime changes with other nodes through etcd (discovery.go).
	Fleet *Fleet `yaml:"fleet,omitempty"`
	// HA makes this instance one director of a VRRP virtual router: see ha.go.
	HA *HA `yaml:"ha,omitempty"`
	// BGP makes this instance one of several active directors behind routers: see bgp.go.
	BGP *BGP `yaml:"bgp,omitempty"`
}

// Listener is one address Ballast accepts client connections on.
type Listener struct {
	Name    string `yaml:"name"`
	Address string `yaml:"address"`
	// Protocol is what the listener balances: http requests (default), tcp connections or udp flows.
	Protocol string `yaml:"protocol"`
	// AcceptProxy requires a PROXY protocol (v1 or v2) header on every connection and takes the
	// client's address from it; a connection without a valid one is closed and counted.
	AcceptProxy bool `yaml:"accept_proxy,omitempty"`
	// MaxFlows caps a udp listener's concurrent flows; datagrams that would open more are dropped.
	MaxFlows int `yaml:"max_flows,omitempty"`
	// NewFlowRate and NewFlowBurst bound the udp flows a listener starts per second and at once
	// (config/udp.go); datagrams that would start more are dropped and counted.
	NewFlowRate  int `yaml:"new_flow_rate,omitempty"`
	NewFlowBurst int `yaml:"new_flow_burst,omitempty"`
	// Forwarding hands a tcp or udp listener's flows to the XDP director (dr, tun or nat) on
	// Interface instead of a proxy: the address is the VIP and no socket is bound (config/xdp.go).
	Forwarding string `yaml:"forwarding,omitempty"`
	Interface  string `yaml:"interface,omitempty"`
	// TLS, when set, terminates TLS on this listener; ALPN offers h2 and http/1.1.
	TLS *TLS `yaml:"tls,omitempty"`
	// H2C accepts HTTP/2 with prior knowledge (cleartext) on a plain http listener, besides HTTP/1.
	H2C bool `yaml:"h2c,omitempty"`
	// ReadHeaderTimeout bounds how long a client may take to send its request headers (slowloris).
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes a client keep-alive connection that sent nothing for this long; on tcp
	// listeners a proxied connection with no bytes either way, on udp a flow with no datagrams.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps the request line plus headers; larger requests get 431.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxKeepAliveRequests closes a client connection after this many requests; 0 = unlimited.
	MaxKeepAliveRequests int `yaml:"max_keepalive_requests"`
	// ExposeBackend adds the X-Ballast-Backend response header naming the backend that served.
	ExposeBackend bool `yaml:"expose_backend"`
	// ListenerPolicy: request IDs, access control, per-client connection limit (policy.go).
	ListenerPolicy `yaml:",inline"`
}

// TLS names a listener's certificates (PEM files) and its protocol policy. The files are
// read again on every reload.
type TLS struct {
	Cert string `yaml:"cert"` // the default certificate chain
	Key  string `yaml:"key"`
	// Certificates are more certificates; each is chosen when the client's SNI names one of
	// the certificate's names (its DNS SANs), else Cert/Key is used.
	Certificates []Certificate `yaml:"certificates,omitempty"`
	MinVersion   string        `yaml:"min_version"`       // "1.2" (default) or "1.3"
	Ciphers      []string      `yaml:"ciphers,omitempty"` // TLS 1.2 suites by name; default Go's secure list
}

// Certificate is a certificate chain and its private key in PEM files.
type Certificate struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Route sends requests matching a host and a path prefix to a pool. Routes are matched in order;
// an empty Host matches every host and an empty PathPrefix every path.
type Route struct {
	Listener   string `yaml:"listener"` // empty = every listener
	Host       string `yaml:"host"`
	PathPrefix string `yaml:"path_prefix"`
	// SNI matches a tcp connection by the server name of its TLS ClientHello, read without
	// terminating TLS (passthrough); empty matches every connection.
	SNI  string `yaml:"sni,omitempty"`
	Pool string `yaml:"pool"`
	// RoutePolicy: headers, rewrites, redirects, limits, compression (policy.go).
	RoutePolicy `yaml:",inline"`
}

// Pool is a set of backends balanced by one algorithm.
type Pool struct {
	Name     string `yaml:"name"`
	Balancer string `yaml:"balancer"` // a name from balance.Names()
	// MaxInit is vnswrr's build batch (Tengine's max_init).
	MaxInit int `yaml:"max_init"`
	// TableSize is maglev's lookup-table size (a prime).
	TableSize int `yaml:"table_size"`
	// HashBalanceFactor bounds ringhash loads, e.g. 1.25; 0 = unbounded.
	HashBalanceFactor float64 `yaml:"hash_balance_factor"`
	// HashKey says what hash balancers hash.
	HashKey HashKey `yaml:"hash_key"`

	Backends []Backend `yaml:"backends"`
	// Discovery adds backends found in DNS, a file or the fleet (discovery.go).
	Discovery *Discovery `yaml:"discovery,omitempty"`

	// MaxConns is the default per-backend connection limit (lighttpd's max-pool-size); 0 = none.
	MaxConns int `yaml:"max_conns"`
	// MaxQueue bounds the pool's backlog queue; requests beyond it get 503. 0 = no queue.
	MaxQueue int `yaml:"max_queue"`
	// QueueTimeout is the longest a request waits in the backlog queue before a 503.
	QueueTimeout Duration `yaml:"queue_timeout"`

	Retries   Retries   `yaml:"retries"`
	Hedge     Hedge     `yaml:"hedge"`
	Timeouts  Timeouts  `yaml:"timeouts"`
	KeepAlive KeepAlive `yaml:"keepalive"`

	// Protocol is what the pool speaks to its backends: http1 (default), h2 (HTTP/2 over TLS)
	// or h2c (HTTP/2 with prior knowledge, cleartext).
	Protocol string `yaml:"protocol,omitempty"`
	// TLS, when set, connects to the backends over TLS.
	TLS *BackendTLS `yaml:"tls,omitempty"`

	// SendProxy prefixes each connection to a backend of a tcp pool with a PROXY protocol header
	// carrying the client's address: v1 (text) or v2 (binary); empty sends none.
	SendProxy string `yaml:"send_proxy,omitempty"`
	// Persistence keeps a client IP on the backend it last used for this long after its last
	// connection or flow ends (LVS -p); 0 turns it off. tcp and udp pools only.
	Persistence Duration `yaml:"persistence,omitempty"`

	// SlowStart ramps a returning or added backend's weight from 10 % to full over this window.
	SlowStart Duration    `yaml:"slow_start"`
	Health    HealthCheck `yaml:"health_check"`
	Outlier   Outlier     `yaml:"outlier"`
	// Sticky keeps a client on one backend with a cookie (policy.go).
	Sticky *Sticky `yaml:"sticky,omitempty"`
}

// BackendTLS is how Ballast connects to a pool's backends over TLS.
type BackendTLS struct {
	CA         string `yaml:"ca"`          // PEM file of CAs to trust; empty = the system roots
	ServerName string `yaml:"server_name"` // name to verify and send as SNI; default the backend's host
	// InsecureSkipVerify accepts any certificate: only for tests, and only when written.
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify,omitempty"`
	Cert               string `yaml:"cert"` // client certificate for mTLS (with Key)
	Key                string `yaml:"key"`
}

// HashKey selects the request attribute hash balancers map to a backend.
type HashKey struct {
	Source string `yaml:"source"` // source_ip | uri | header | cookie (http); source_ip | flow (tcp, udp)
	Name   string `yaml:"name"`   // the header or cookie name
}

// Backend is one server of a pool.
type Backend struct {
	Address  string `yaml:"address"` // host:port
	Name     string `yaml:"name"`    // defaults to Address; the stable identity
	Weight   int    `yaml:"weight"`  // default 1; 0 = no new traffic
	Backup   bool   `yaml:"backup"`
	Down     bool   `yaml:"down"`
	MaxConns int    `yaml:"max_conns"` // overrides the pool's max_conns
}

// Retries moves a failed request to a different backend.
type Retries struct {
	// Attempts is the number of tries in all, first one included (default 3).
	Attempts int `yaml:"attempts"`
	// Budget caps retries (and hedges) at this fraction of requests (default 0.2).
	Budget float64 `yaml:"budget"`
	// NonIdempotent also retries POST/PATCH when the backend never received the request.
	NonIdempotent bool `yaml:"non_idempotent"`
}

// Hedge sends a copy of a slow idempotent request to another backend; the first answer wins.
type Hedge struct {
	Delay     Duration `yaml:"delay"`      // 0 = hedging off
	MaxHedges int      `yaml:"max_hedges"` // extra copies at most (default 1)
}

// Timeouts of the backend side.
type Timeouts struct {
	Connect  Duration `yaml:"connect"`  // default 2s
	Response Duration `yaml:"response"` // time to response headers, default 60s; 504 after
	Idle     Duration `yaml:"idle"`     // idle backend keep-alive connections close after, default 60s
}

// KeepAlive limits pooled backend connections.
type KeepAlive struct {
	MaxIdle     int `yaml:"max_idle"`     // idle connections kept per backend (default 1024)
	MaxRequests int `yaml:"max_requests"` // requests per backend connection; 0 = unlimited
}

// HealthCheck is the pool's active check; Interval 0 turns it off.
type HealthCheck struct {
	Type         string   `yaml:"type"`              // http | tcp | grpc
	Service      string   `yaml:"service,omitempty"` // grpc: the grpc.health.v1 service name; empty = the server
	Method       string   `yaml:"method"`
	Path         string   `yaml:"path"`
	Host         string   `yaml:"host"`
	ExpectStatus string   `yaml:"expect_status"` // e.g. "200-399"
	ExpectBody   string   `yaml:"expect_body"`
	Interval     Duration `yaml:"interval"`
	DownInterval Duration `yaml:"down_interval"`
	Timeout      Duration `yaml:"timeout"`
	Rise         int      `yaml:"rise"`
	Fall         int      `yaml:"fall"`
}

// Outlier is passive health: eject backends that keep failing.
type Outlier struct {
	ConsecutiveFailures int      `yaml:"consecutive_failures"` // 0 = off
	Include5xx          bool     `yaml:"include_5xx"`
	BaseEjection        Duration `yaml:"base_ejection"`
	MaxEjectionPercent  int      `yaml:"max_ejection_percent"`
	PanicThreshold      int      `yaml:"panic_threshold_percent"`
	// Interval is how often failure_percentage judges the requests of the interval just ended.
	Interval          Duration          `yaml:"interval"`
	FailurePercentage FailurePercentage `yaml:"failure_percentage"`
}

// FailurePercentage ejects a backend whose share of failed requests over one outlier interval
// reaches Threshold (Envoy's failure_percentage outlier detection).
type FailurePercentage struct {
	Threshold     int `yaml:"threshold"`      // percent of the interval's requests; 0 = off
	RequestVolume int `yaml:"request_volume"` // a backend with fewer requests in the interval is not judged
	MinimumHosts  int `yaml:"minimum_hosts"`  // judge only when this many backends reach request_volume
}

// Admin is the runtime API, status page and metrics listener.
type Admin struct {
	Address string `yaml:"address"` // empty = off
	Token   string `yaml:"token"`   // bearer token for changes; required unless loopback-only
	// ReadToken grants reads only; Reads says whether reads need a token (config/admin.go).
	ReadToken string `yaml:"read_token,omitempty"`
	Reads     string `yaml:"reads,omitempty"`
}

// Logging configures the error and access logs.
type Logging struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
	Access bool   `yaml:"access"` // access log, off by default
	// AccessLog says where the access log goes and how it reads (policy.go).
	AccessLog `yaml:",inline"`
}

// Duration is a time.Duration written like "5s" or "250ms" in YAML.
type Duration struct{ time.Duration }
