package netlab

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
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

// TestTwoDirectors: with Options.Directors 2, both directors are on the segment at their own
// addresses; cutting a director's switch port or its own link takes it off, and bringing it
// back restores it.
func TestTwoDirectors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces)")
	}
	l, err := New(Options{Reals: 1, Directors: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Directors) != 2 || l.Director != l.Directors[0] || l.Directors[1].IP != DirectorIPs(1) || l.Director.IP != DirectorIP {
		t.Fatalf("directors %+v", l.Directors)
	}
	reach := func(n *Node) error {
		ln, err := l.Listen(n.NS, "tcp4", n.IP.String()+":0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		c, err := l.Dialer(l.Client.NS)(ctx, "tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, n := range l.Directors {
		if err := reach(n); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
	}
	d := l.Directors[1]
	// Dropping one protocol: TCP blocked, UDP only leaves TCP through.
	for _, c := range []struct {
		proto uint8
		reach bool
	}{{6, false}, {17, true}} {
		if err := l.DropProto(d, c.proto, true); err != nil {
			t.Fatal(err)
		}
		if err := reach(d); (err == nil) != c.reach {
			t.Errorf("dropping protocol %d: TCP to %s reached %v, want %v", c.proto, d.Name, err == nil, c.reach)
		}
		if err := l.DropProto(d, c.proto, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := reach(d); err != nil {
		t.Errorf("after the drops: %v", err)
	}
	for _, cut := range []struct {
		name string
		set  func(*Node, bool) error
	}{{"switch port", l.SetSwitchPort}, {"link", l.SetLink}, {"partition", func(n *Node, up bool) error { return l.Partition(n, !up) }}} {
		if err := cut.set(d, false); err != nil {
			t.Fatal(err)
		}
		if err := reach(d); err == nil {
			t.Errorf("%s down: %s still reachable", cut.name, d.Name)
		}
		if cut.name == "partition" {
			_ = l.In(d.NS, func() error {
				if ifi, err := net.InterfaceByName("eth0"); err != nil || ifi.Flags&net.FlagRunning == 0 {
					t.Errorf("partitioned, %s lost its carrier: %v %v", d.Name, ifi, err)
				}
				return nil
			})
		}
		if err := cut.set(d, true); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for reach(d) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s up again: %s not reachable", cut.name, d.Name)
			}
		}
	}
}
