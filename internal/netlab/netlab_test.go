package netlab

import (
	"os"
	"strings"
	"testing"
)

// TestPlainSwitch: the bridge's namespace forwards frames without the IP firewall hooks where
// the host's br_netfilter would otherwise turn them on, and the client still reaches a real
// server across it.
func TestPlainSwitch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces)")
	}
	l, err := New(Options{Reals: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = l.In(l.sw, func() error {
		b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
		if os.IsNotExist(err) {
			t.Log("no br_netfilter on this host: nothing to turn off")
			return nil
		}
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(b)); got != "0" {
			t.Errorf("bridge-nf-call-iptables = %s in the switch's namespace, want 0", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := l.Listen(l.Reals[0].NS, "tcp4", RealIP(0).String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	c, err := l.Dialer(l.Client.NS)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "ok" {
		t.Fatalf("client across the bridge read %q, %v", buf, err)
	}
}
