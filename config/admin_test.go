package config

import (
	"net/netip"
	"strings"
	"testing"
)

// TestSelfTarget: which backend addresses reach a listener of the process.
func TestSelfTarget(t *testing.T) {
	self := []SelfAddr{
		{netip.MustParseAddrPort("127.0.0.1:9090"), "the admin listener"},
		{netip.MustParseAddrPort("[::]:8080"), "listener web"},
		{netip.MustParseAddrPort("10.1.2.3:53"), "listener dns"},
	}
	cases := []struct{ backend, want string }{
		{"127.0.0.1:9090", "the admin listener"},
		{"localhost:9090", "the admin listener"},
		{"0.0.0.0:9090", "the admin listener"},
		{"127.0.0.2:9090", ""}, // a loopback address the admin listener is not bound to
		{"127.0.0.1:8080", "listener web"},
		{"127.9.9.9:8080", "listener web"},
		{"[::1]:8080", "listener web"},
		{"10.1.2.3:53", "listener dns"},
		{"10.1.2.4:53", ""},
		{"192.0.2.1:8080", ""}, // not an address of this machine
		{"backend.example:8080", ""},
		{"127.0.0.1:8081", ""},
	}
	for _, c := range cases {
		if got := SelfTarget(c.backend, self); got != c.want {
			t.Errorf("SelfTarget(%s) = %q, want %q", c.backend, got, c.want)
		}
	}
}

// TestAdminRules: the admin keys' rules and defaults, as a file meets them.
func TestAdminRules(t *testing.T) {
	cases := []struct{ what, yaml, want string }{
		{"short token", "admin: {address: 127.0.0.1:9090, token: abc}", "admin.token: must be at least 16 bytes long, got 3"},
		{"short read token", "admin: {address: 127.0.0.1:9090, read_token: abc}", "admin.read_token: must be at least 16 bytes"},
		{"same tokens", "admin: {address: 127.0.0.1:9090, token: 0123456789abcdef, read_token: 0123456789abcdef}", "must differ from admin.token"},
		{"reads token without one", "admin: {address: 127.0.0.1:9090, reads: token}", "reads: token needs admin.token or admin.read_token"},
		{"unknown reads", "admin: {address: 127.0.0.1:9090, reads: maybe}", `unknown value "maybe"`},
		{"backend is the admin listener", "admin: {address: 127.0.0.1:9090}\npools: [{name: p, backends: [{address: 127.0.0.1:9090}]}]", "is the admin listener of this process"},
		{"backend is a listener", "listeners: [{name: web, address: \":18080\"}]\npools: [{name: p, backends: [{address: localhost:18080}]}]", "is listener web of this process"},
		{"a name with a newline", "pools: [{name: p, backends: [{name: \"a\\nb\", address: 127.0.0.1:1}]}]", "is not a letter, digit"},
		{"a name of 129 bytes", "pools: [{name: p, backends: [{name: " + strings.Repeat("n", 129) + ", address: 127.0.0.1:1}]}]", "1 to 128 bytes"},
	}
	for _, c := range cases {
		y := c.yaml
		if !strings.Contains(y, "pools:") {
			y += "\npools: [{name: p, backends: [{address: 127.0.0.1:1}]}]"
		}
		if !strings.Contains(y, "listeners:") {
			y = "listeners: [{address: \"127.0.0.1:0\"}]\n" + y
		}
		_, err := Parse("t.yaml", []byte(y))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
	}
	for addr, want := range map[string]string{"127.0.0.1:9090": ReadsOpen, "[::1]:9090": ReadsOpen, "0.0.0.0:9090": ReadsToken, ":9090": ReadsToken} {
		c, err := Parse("t.yaml", []byte("listeners: [{address: \"127.0.0.1:0\"}]\npools: [{name: p, backends: [{address: 127.0.0.1:1}]}]\nadmin: {address: \""+addr+"\", token: 0123456789abcdef}"))
		if err != nil {
			t.Fatal(err)
		}
		if c.Admin.Reads != want {
			t.Errorf("admin.address %s: reads %q, want %q", addr, c.Admin.Reads, want)
		}
	}
}
