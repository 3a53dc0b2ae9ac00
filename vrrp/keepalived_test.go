package vrrp

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"ballast/internal/netlab"
)

const keepalivedBin = "/usr/sbin/keepalived"

// keepalived is Debian's keepalived running in one director's namespace with its own config,
// pid files and log, in the foreground.
type keepalived struct {
	t    *testing.T
	l    *netlab.Lab
	n    *netlab.Node
	dir  string
	cmd  *exec.Cmd
	prio int
	peer netip.Addr // unicast peer, or invalid for multicast
}

func newKeepalived(t *testing.T, l *netlab.Lab, n *netlab.Node, prio int, peer netip.Addr) *keepalived {
	t.Helper()
	if _, err := os.Stat(keepalivedBin); err != nil {
		t.Skipf("skipping: %s is not installed (Debian package keepalived)", keepalivedBin)
	}
	return &keepalived{t: t, l: l, n: n, dir: t.TempDir(), prio: prio, peer: peer}
}

func (k *keepalived) start() {
	k.t.Helper()
	var unicast string
	if k.peer.IsValid() {
		unicast = fmt.Sprintf("  unicast_src_ip %s\n  unicast_peer {\n    %s\n  }\n", k.n.IP, k.peer)
	}
	var vips strings.Builder
	for _, a := range testAddrs {
		fmt.Fprintf(&vips, "    %s/32\n", a)
	}
	conf := fmt.Sprintf(`global_defs {
  router_id ballast-test
  enable_script_security
  vrrp_garp_master_delay 0
}
vrrp_instance VI {
  state BACKUP
  interface eth0
  virtual_router_id %d
  priority %d
  advert_int %.2f
  version 3
%s  virtual_ipaddress {
%s  }
}
`, testVRID, k.prio, testIv.Seconds(), unicast, vips.String())
	// Stale pid files from a killed run would make it refuse to start ("already running"
	// while the killed VRRP child is not yet reaped).
	_ = os.Remove(filepath.Join(k.dir, "keepalived.pid"))
	_ = os.Remove(filepath.Join(k.dir, "vrrp.pid"))
	path := filepath.Join(k.dir, "keepalived.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		k.t.Fatal(err)
	}
	log, err := os.OpenFile(filepath.Join(k.dir, "keepalived.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		k.t.Fatal(err)
	}
	defer log.Close()
	// -n: foreground; -l -D: log to the console, in detail; --vrrp: the VRRP subsystem only;
	// its own pid files, so that it runs beside any other keepalived.
	k.cmd = exec.Command(keepalivedBin, "-n", "-l", "-D", "--vrrp", "-f", path,
		"-p", filepath.Join(k.dir, "keepalived.pid"), "-r", filepath.Join(k.dir, "vrrp.pid"))
	k.cmd.Stdout, k.cmd.Stderr = log, log
	if err := k.l.Start(k.n.NS, k.cmd); err != nil {
		k.t.Fatal(err)
	}
	cmd := k.cmd
	k.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

// kill ends keepalived with sig and waits for it (and its VRRP child) to be gone.
func (k *keepalived) kill(sig syscall.Signal) {
	k.t.Helper()
	if sig == syscall.SIGKILL {
		// keepalived's VRRP work is done by a child process: kill it first, as a crash would.
		if b, err := os.ReadFile(filepath.Join(k.dir, "vrrp.pid")); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = k.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = k.cmd.Process.Kill()
		<-done
	}
}

// master reports whether keepalived holds the virtual addresses (it adds them to eth0 as
// master and removes them as backup).
func (k *keepalived) master() bool {
	var has bool
	_ = k.l.In(k.n.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(eth0, netlink.FAMILY_V4)
		for _, a := range addrs {
			if a.IP.Equal(testVIP.AsSlice()) {
				has = true
			}
		}
		return err
	})
	return has
}

func (k *keepalived) logTail() string {
	b, _ := os.ReadFile(filepath.Join(k.dir, "keepalived.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// TestKeepalivedInterop: a Ballast speaker and Debian's keepalived in one virtual router,
// each way round and over multicast and unicast: the higher priority is master and the other
// stays backup; the master killed, the other takes over within its Master_Down_Interval;
// back, the master preempts.
func TestKeepalivedInterop(t *testing.T) {
	for _, c := range []struct {
		name    string
		unicast bool
		ballast uint8 // Ballast's priority; keepalived's is 100
	}{
		{"ballast master, multicast", false, 150},
		{"keepalived master, multicast", false, 50},
		{"ballast master, unicast", true, 150},
		{"keepalived master, unicast", true, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newHALab(t)
			bn, kn := l.Directors[0], l.Directors[1]
			var bPeers []netip.Addr
			var kPeer netip.Addr
			if c.unicast {
				bPeers, kPeer = []netip.Addr{kn.IP}, bn.IP
			}
			k := newKeepalived(t, l, kn, 100, kPeer)
			const slack = 800 * time.Millisecond // process start and scheduling
			mdiK := NewMachine(Config{Priority: 100, Interval: testIv}).MasterDownInterval()
			mdiB := NewMachine(Config{Priority: c.ballast, Interval: testIv}).MasterDownInterval()
			b := startRouter(t, l, bn, c.ballast, bPeers...)
			k.start()
			defer func() {
				if t.Failed() {
					t.Logf("keepalived's log:\n%s", k.logTail())
				}
			}()
			ballastMaster := func() bool { return b.s.Status().State == Master && !k.master() }
			keepalivedMaster := func() bool {
				st := b.s.Status()
				return st.State == Backup && st.Master == kn.IP && st.MasterPriority == 100 && k.master()
			}
			if c.ballast > 100 {
				wait(t, "Ballast master, keepalived backup", 3*time.Second, ballastMaster)
				checkOwner(t, l, bn)
				// Held for a while: keepalived hears Ballast's adverts and stays backup.
				time.Sleep(5 * mdiK)
				if !ballastMaster() {
					t.Fatalf("after %v: Ballast %s, keepalived master %v", 5*mdiK, b.s.Status().State, k.master())
				}
				// Ballast's master killed (closed without a word: its socket and responder
				// go): keepalived takes over within its Master_Down_Interval.
				b.s.raw.Close() // no more adverts, as a dead process sends none
				took := wait(t, "keepalived master after Ballast died", mdiK+slack, k.master)
				t.Logf("keepalived master %v after Ballast's adverts stopped (Master_Down_Interval %v)", took, mdiK)
				b.close()
				// Ballast returns and preempts.
				b = startRouter(t, l, bn, c.ballast, bPeers...)
				took = wait(t, "Ballast master again (preempted)", mdiB+slack, ballastMaster)
				t.Logf("Ballast preempted keepalived after %v", took)
				checkOwner(t, l, bn)
				return
			}
			wait(t, "keepalived master, Ballast backup", 3*time.Second, keepalivedMaster)
			time.Sleep(5 * mdiB)
			if !keepalivedMaster() {
				t.Fatalf("after %v: Ballast %+v, keepalived master %v", 5*mdiB, b.s.Status(), k.master())
			}
			if st := b.s.Status(); st.Errors["checksum"] != 0 || st.AdvertsReceived == 0 || st.AddrMismatch != 0 {
				t.Errorf("Ballast's counters of keepalived's adverts: %+v", st)
			}
			k.kill(syscall.SIGKILL)
			took := wait(t, "Ballast master after keepalived was killed", mdiB+slack, func() bool { return b.s.Status().State == Master })
			t.Logf("Ballast master %v after keepalived's SIGKILL (Master_Down_Interval %v)", took, mdiB)
			if !onLo(t, l, bn, testLocal) {
				t.Errorf("Ballast is master but %s is not on its lo", testLocal)
			}
			// keepalived killed leaves its addresses on eth0, and its host keeps answering ARP
			// for them next to Ballast (what Ballast's own responder avoids: see
			// TestSpeakerSIGKILL). A new keepalived removes them at start and, with the higher
			// priority, preempts.
			if !k.master() {
				t.Log("the killed keepalived left no address behind")
			}
			k.start()
			wait(t, "keepalived master again (preempted)", mdiK+3*time.Second, keepalivedMaster)
		})
	}
}
