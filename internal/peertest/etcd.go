package peertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Etcd is a real etcd (Debian's etcd-server) on two loopback ports with a temporary data
// directory, which a test may stop and start again (the data and the ports stay).
type Etcd struct {
	t      testing.TB
	bin    string
	ctl    string
	dir    string
	Addr   string // client address, 127.0.0.1:PORT
	peer   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
	// Cert and Key, when set (StartEtcdTLS), make etcd serve https and require a client
	// certificate signed by Cert (a self-signed one serves as its own CA).
	Cert, Key string
}

// StartEtcd starts etcd and returns it once it answers; it is killed when the test ends.
func StartEtcd(t testing.TB) *Etcd { return startEtcd(t, "", "") }

// StartEtcdTLS is StartEtcd with TLS and client certificates (cert and key are PEM files; cert
// is also the CA clients must be signed by).
func StartEtcdTLS(t testing.TB, cert, key string) *Etcd { return startEtcd(t, cert, key) }

func startEtcd(t testing.TB, cert, key string) *Etcd {
	t.Helper()
	e := &Etcd{t: t, bin: Binary(t, "etcd", "etcd-server"), ctl: Binary(t, "etcdctl", "etcd-client"), dir: t.TempDir(), Cert: cert, Key: key}
	for try := 0; ; try++ {
		e.Addr = fmt.Sprintf("127.0.0.1:%d", FreePort(t, "tcp"))
		e.peer = fmt.Sprintf("127.0.0.1:%d", FreePort(t, "tcp"))
		if e.start() {
			break
		}
		if try == 4 {
			t.Fatal("etcd did not start in 5 tries")
		}
		_ = os.RemoveAll(filepath.Join(e.dir, "data"))
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() && e.log != nil {
			b, _ := os.ReadFile(e.log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("etcd output (tail):\n%s", b)
		}
	})
	return e
}

func (e *Etcd) start() bool {
	e.t.Helper()
	var err error
	if e.log == nil {
		if e.log, err = os.Create(filepath.Join(e.dir, "etcd.log")); err != nil {
			e.t.Fatal(err)
		}
	}
	scheme, extra := "http://", []string(nil)
	if e.Cert != "" {
		scheme = "https://"
		extra = []string{"--cert-file", e.Cert, "--key-file", e.Key, "--trusted-ca-file", e.Cert, "--client-cert-auth"}
	}
	e.cmd = exec.Command(e.bin, append([]string{"--name", "test", "--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", scheme + e.Addr, "--advertise-client-urls", scheme + e.Addr,
		"--listen-peer-urls", "http://" + e.peer, "--initial-advertise-peer-urls", "http://" + e.peer,
		"--initial-cluster", "test=http://" + e.peer, "--log-level", "warn"}, extra...)...)
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(e.cmd, e.exited)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-e.exited:
			return false
		default:
		}
		if out, err := exec.Command(e.ctl, append(e.ctlFlags(), "--dial-timeout", "1s", "--command-timeout", "1s", "endpoint", "health")...).CombinedOutput(); err == nil && strings.Contains(string(out), "is healthy") {
			return true
		}
	}
	e.t.Fatal("etcd not healthy after 20s")
	return false
}

// Stop kills etcd and waits for it.
func (e *Etcd) Stop() {
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
	e.cmd = nil
}

// Restart starts etcd again on the same ports and data.
func (e *Etcd) Restart() {
	e.t.Helper()
	if !e.start() {
		e.t.Fatal("etcd did not start again")
	}
}

// Ctl runs etcdctl against this etcd and returns its output.
func (e *Etcd) Ctl(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(e.ctl, append(append(e.ctlFlags(), "--command-timeout", "5s"), args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("etcdctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Endpoint is the client URL (https:// with TLS).
func (e *Etcd) Endpoint() string {
	if e.Cert != "" {
		return "https://" + e.Addr
	}
	return "http://" + e.Addr
}

func (e *Etcd) ctlFlags() []string {
	f := []string{"--endpoints", e.Endpoint()}
	if e.Cert != "" {
		f = append(f, "--cacert", e.Cert, "--cert", e.Cert, "--key", e.Key)
	}
	return f
}
