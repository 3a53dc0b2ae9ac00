package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDiscoveryValidation: each discovery and fleet rule names file:line, the field and what
// is valid; good forms load with their defaults.
func TestDiscoveryValidation(t *testing.T) {
	base := "listeners: [{address: 127.0.0.1:8080}]\npools:\n  - name: api\n"
	tests := []struct {
		name, pool, top string
		want            string // "" = loads
	}{
		{"srv", "    discovery: {dns: {name: _http._tcp.api.test, type: srv, resolvers: [127.0.0.1:53], min_ttl: 1s, max_ttl: 5m}}\n", "", ""},
		{"a with port", "    discovery: {dns: {name: api.test, type: a, port: 8080}}\n", "", ""},
		{"file", "    discovery: {file: backends.yaml}\n", "", ""},
		{"fleet", "    discovery: {fleet: true}\n", "fleet: {etcd: {endpoints: [127.0.0.1:2379], prefix: /ballast/prod}}\n", ""},
		{"a without port", "    discovery: {dns: {name: api.test, type: a}}\n", "", "test.yaml:4:22: pools[0].discovery.dns.port: type a answers give addresses only: set the backends' port"},
		{"srv with port", "    discovery: {dns: {name: api.test, port: 80}}\n", "", "pools[0].discovery.dns.port: SRV records carry their own ports"},
		{"bad type", "    discovery: {dns: {name: api.test, type: mx}}\n", "", `test.yaml:4:45: pools[0].discovery.dns.type: unknown record type "mx" (valid: srv, a, aaaa)`},
		{"bad resolver", "    discovery: {dns: {name: api.test, resolvers: [dns.example:53]}}\n", "", `pools[0].discovery.dns.resolvers[0]: a resolver is IP:PORT`},
		{"ttl order", "    discovery: {dns: {name: api.test, min_ttl: 10s, max_ttl: 1s}}\n", "", "pools[0].discovery.dns.max_ttl: must be at least min_ttl (10s), got 1s"},
		{"ttl floor", "    discovery: {dns: {name: api.test, min_ttl: 1ms}}\n", "", "pools[0].discovery.dns.min_ttl: must be at least 100ms"},
		{"two sources", "    discovery: {file: b.yaml, dns: {name: api.test}}\n", "", "pools[0].discovery: give exactly one source (valid: dns, file, fleet), got 2"},
		{"no source", "    discovery: {max_backends: 5}\n", "", "give exactly one source (valid: dns, file, fleet), got 0"},
		{"cap", "    discovery: {file: b.yaml, max_backends: 20000}\n", "", "pools[0].discovery.max_backends: must be between 1 and 10000, got 20000"},
		{"fleet without etcd", "    discovery: {fleet: true}\n", "", "pools[0].discovery.fleet: fleet: true takes the backends from the fleet's etcd prefix: configure fleet.etcd too"},
		{"no backends, no discovery", "    max_conns: 1\n", "", "pools[0].backends: a pool needs at least one backend"},
		{"fleet prefix", "    backends: [{address: 127.0.0.1:8081}]\n", "fleet: {etcd: {endpoints: [127.0.0.1:2379], prefix: ballast}}\n", `fleet.etcd.prefix: must start with / and have no spaces, e.g. /ballast/prod; got "ballast"`},
		{"fleet endpoint", "    backends: [{address: 127.0.0.1:8081}]\n", "fleet: {etcd: {endpoints: ['ftp://x:1'], prefix: /b}}\n", `fleet.etcd.endpoints[0]: "ftp://x:1": scheme must be http or https`},
		{"fleet no etcd", "    backends: [{address: 127.0.0.1:8081}]\n", "fleet: {}\n", "fleet.etcd: the fleet needs etcd"},
		{"fleet auth", "    backends: [{address: 127.0.0.1:8081}]\n", "fleet: {etcd: {endpoints: [127.0.0.1:2379], prefix: /b, username: u}}\n", "fleet.etcd.username: set both username and password, or neither"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(base+tc.pool+tc.top))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
			_ = c
		})
	}
}

func TestDiscoveryDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte("listeners: [{address: 127.0.0.1:8080}]\npools:\n  - name: api\n    discovery: {dns: {name: _x._tcp.api.test}}\nfleet: {etcd: {endpoints: [127.0.0.1:2379], prefix: /ballast/prod/}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ds := c.Pools[0].Discovery
	n := ds.DNS
	if ds.MaxBackends != DefaultDiscoveryMaxBackends || n.Type != DNSTypeSRV || len(n.Resolvers) != 1 || n.Resolvers[0] != DefaultDNSResolver ||
		n.MinTTL.Duration != time.Second || n.MaxTTL.Duration != 5*time.Minute || n.Timeout.Duration != DefaultDNSTimeout {
		t.Errorf("defaults %+v %+v", ds, n)
	}
	if e := c.Fleet.Etcd; e.Prefix != "/ballast/prod" || e.MaxKeys != DefaultFleetMaxKeys {
		t.Errorf("fleet defaults %+v", e)
	}
	// The normalised form loads back to the same values.
	c2, err := Parse("n.yaml", c.Normalised())
	if err != nil {
		t.Fatalf("normalised form: %v\n%s", err, c.Normalised())
	}
	if !reflect.DeepEqual(c2.Pools[0].Discovery, c.Pools[0].Discovery) || !reflect.DeepEqual(c2.Fleet, c.Fleet) {
		t.Errorf("normalised discovery %+v", c2.Pools[0].Discovery.DNS)
	}
}

// TestParseBackends: a discovery file is read as strictly as a configuration.
func TestParseBackends(t *testing.T) {
	bs, err := ParseBackends("b.yaml", []byte("backends:\n  - address: 10.0.0.1:80\n  - {address: 10.0.0.2:80, weight: 0, name: two, backup: true}\n"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Name != "10.0.0.1:80" || bs[0].Weight != 1 || bs[1].Weight != 0 || bs[1].Name != "two" || !bs[1].Backup {
		t.Errorf("backends %+v", bs)
	}
	bad := []struct{ in, want string }{
		{"backends:\n  - address: 10.0.0.1\n", `b.yaml:2:14: backends[0].address: "10.0.0.1" is not host:port`},
		{"backends:\n  - address: 10.0.0.1:80\n    wieght: 2\n", `b.yaml:3:5: backends[0].wieght: unknown key "wieght" in backends[0] (did you mean "weight"?`},
		{"backends:\n  - {address: 10.0.0.1:80}\n  - {address: 10.0.0.1:80}\n", `b.yaml:3:5: backends[1].name: backend "10.0.0.1:80" is already backends[0]`},
		{"backends:\n  - {address: 10.0.0.1:80, weight: 10001}\n", `b.yaml:2:36: backends[0].weight: must be between 0 (no new traffic) and 10000, got 10001`},
		{"backends: [\n", "b.yaml:1: YAML syntax"},
		{"servers: []\n", `b.yaml:1:1: servers: unknown key "servers" at the top level`},
		{"", "b.yaml: backends: a backends file lists backends"},
		{"backends:\n" + strings.Repeat("  - address: 10.0.0.1:80\n", 11), "b.yaml:2:3: backends: 11 backends; at most 10 (discovery.max_backends)"},
	}
	for _, tc := range bad {
		_, err := ParseBackends("b.yaml", []byte(tc.in), 10)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v\nwant %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseBackends: a discovery file never panics the parser, and what it accepts obeys the
// rules a pool's backends obey.
func FuzzParseBackends(f *testing.F) {
	f.Add([]byte("backends:\n  - address: 10.0.0.1:80\n"))
	f.Add([]byte("backends: [{address: a:1, weight: 0, name: x}, {address: b:2, backup: true, max_conns: 3}]"))
	f.Add([]byte("backends: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		bs, err := ParseBackends("f.yaml", data, 100)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, b := range bs {
			if CheckBackend(b) != nil || b.Name == "" || seen[b.Name] {
				t.Fatalf("accepted %+v", b)
			}
			seen[b.Name] = true
		}
	})
}
