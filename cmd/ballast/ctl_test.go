package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"ballast/admin"
	"ballast/config"
	"ballast/health"
	"ballast/upstream"
)

// ctlTarget runs an admin listener over one pool of two (unreachable) backends.
func ctlTarget(t *testing.T, token string) (string, *upstream.Pool) {
	t.Helper()
	pc := config.Pool{Name: "web", Balancer: "roundrobin", Backends: []config.Backend{
		{Name: "a", Address: "127.0.0.1:1", Weight: 1}, {Name: "b", Address: "127.0.0.1:2", Weight: 1}}}
	p, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pl := admin.New(slog.New(slog.DiscardHandler))
	m := health.New(t.Context(), pl.HealthOptions())
	pl.Watch(m)
	t.Cleanup(func() { pl.Close(); m.Close() })
	cfg := &config.Config{Pools: []config.Pool{pc}, Admin: config.Admin{Address: "127.0.0.1:0", Token: token}}
	if err := pl.Install(cfg, map[string]*upstream.Pool{"web": p}); err != nil {
		t.Fatal(err)
	}
	return "http://" + pl.Addr(), p
}

func TestCtl(t *testing.T) {
	url, p := ctlTarget(t, "")
	cases := []struct {
		args   []string
		code   int
		out    string // substring of stdout
		errOut string // substring of stderr
		check  func() bool
	}{
		{[]string{"status"}, 0, "pool web (roundrobin)", "", nil},
		{[]string{"drain", "web", "a"}, 0, "ok: drain a", "", func() bool { return p.Backend("a").State() == upstream.StateDraining }},
		{[]string{"enable", "web", "a"}, 0, "ok: enable a", "", func() bool { return p.Backend("a").State() == upstream.StateUp }},
		{[]string{"disable", "web", "b"}, 0, "ok: disable b", "", func() bool { return p.Backend("b").State() == upstream.StateDisabled }},
		{[]string{"weight", "web", "a", "5"}, 0, "ok: weight a 5", "", func() bool { return p.Backend("a").Weight() == 5 }},
		{[]string{"status"}, 0, "runtime overrides: 2", "", nil},
		{[]string{"add", "web", "127.0.0.1:3", "--weight", "4", "--name", "c"}, 0, "ok: add c", "", func() bool { return p.Backend("c") != nil && p.Backend("c").Weight() == 4 }},
		{[]string{"remove", "web", "c"}, 0, "ok: remove c", "", func() bool { return p.Backend("c") == nil }},
		{[]string{"drain", "web", "zz"}, 1, "", "unknown backend", nil},
		{[]string{"drain", "nope", "a"}, 1, "", "no pool", nil},
		{[]string{"weight", "web", "a", "-1"}, 2, "", "whole number", nil},
		{[]string{"drain", "web"}, 2, "", "usage: ballast ctl drain POOL BACKEND", nil},
		{[]string{"frobnicate"}, 2, "", "unknown command", nil},
		{[]string{"add", "web"}, 2, "", "usage: ballast ctl add", nil},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := runCtl(append([]string{"--admin", url}, tc.args...), &out, &errOut)
			if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.errOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d with %q / %q", code, out.String(), errOut.String(), tc.code, tc.out, tc.errOut)
			}
			if tc.check != nil && !tc.check() {
				t.Fatal("the change did not take effect")
			}
		})
	}
}

func TestCtlStatusJSON(t *testing.T) {
	url, _ := ctlTarget(t, "")
	var out, errOut bytes.Buffer
	if code := runCtl([]string{"--admin", strings.TrimPrefix(url, "http://"), "status", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var r admin.PoolsResponse
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Pools) != 1 || len(r.Pools[0].Backends) != 2 || r.Pools[0].Backends[1].ID != "b" {
		t.Fatalf("status --json: %+v", r)
	}
}

func TestCtlToken(t *testing.T) {
	url, p := ctlTarget(t, "s3cret-s3cret-s3cret")
	cases := []struct {
		token string
		code  int
		hint  string
	}{
		{"", 1, "need --token"},
		{"wrong", 1, "need --token"},
		{"s3cret", 1, "need --token"},
		{"s3cret-s3cret-s3cret", 0, ""},
	}
	for _, tc := range cases {
		t.Setenv("BALLAST_TOKEN", tc.token)
		var out, errOut bytes.Buffer
		code := runCtl([]string{"--admin", url, "disable", "web", "a"}, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.hint) {
			t.Fatalf("token %q: exit %d, stderr %q", tc.token, code, errOut.String())
		}
	}
	if p.Backend("a").State() != upstream.StateDisabled {
		t.Fatal("the authorised disable did not take effect")
	}
}
