package peertest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Zone is a real unbound serving the static local zone ballast.test on a loopback port, whose
// records a test changes while it runs (unbound-control over a Unix socket). Names outside
// ballast.test are refused: it never asks another server.
type Zone struct {
	t    testing.TB
	Addr string // IP:PORT of the resolver
	ctl  string // unbound-control
	conf string
}

// UnboundZone starts unbound (bin) with records (zone-file lines such as
// "api.ballast.test. 1 IN A 127.0.0.2") and returns it once it answers.
func UnboundZone(t testing.TB, bin string, records ...string) *Zone {
	t.Helper()
	ctl := Binary(t, "unbound-control", "unbound")
	dir := Dir(t)
	z := &Zone{t: t, ctl: ctl, conf: filepath.Join(dir, "unbound.conf")}
	var data strings.Builder
	for _, r := range records {
		fmt.Fprintf(&data, "    local-data: %q\n", r)
	}
	port := Start(t, "udp", bin, func(port int) []string {
		conf := fmt.Sprintf(`server:
    interface: 127.0.0.1@%[2]d
    port: %[2]d
    so-reuseport: no
    do-daemonize: no
    do-ip6: no
    access-control: 127.0.0.0/8 allow
    chroot: ""
    username: ""
    directory: "%[1]s"
    pidfile: "%[1]s/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    module-config: "iterator"
    local-zone: "." refuse
    local-zone: "ballast.test." static
    local-data: "ready.ballast.test. 60 IN A 127.0.0.1"
%[3]sremote-control:
    control-enable: yes
    control-interface: "%[1]s/unbound.ctl"
    control-use-cert: no
`, dir, port, data.String())
		if err := os.WriteFile(z.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-d", "-c", z.conf}
	}, func(port int) bool {
		ra := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		c, err := net.DialUDP("udp", nil, ra)
		if err != nil {
			return false
		}
		defer c.Close()
		buf := make([]byte, 512)
		_, _ = c.Write(DNSQuery(1, "ready.ballast.test"))
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := c.Read(buf)
		if err != nil {
			return false
		}
		_, a, err := DNSAnswerA(buf[:n])
		return err == nil && a.String() == "127.0.0.1"
	})
	z.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	return z
}

func (z *Zone) control(stdin string, args ...string) {
	z.t.Helper()
	cmd := exec.Command(z.ctl, append([]string{"-c", z.conf}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if o := strings.TrimSpace(string(out)); err != nil || !(strings.HasPrefix(o, "ok") || strings.HasPrefix(o, "added")) {
		z.t.Fatalf("unbound-control %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Set replaces the records of name with records (zone-file lines of that name).
func (z *Zone) Set(name string, records ...string) {
	z.t.Helper()
	z.control("", "local_data_remove", name)
	if len(records) > 0 {
		z.control(strings.Join(records, "\n")+"\n", "local_datas")
	}
}

// Remove deletes every record of name: it answers NXDOMAIN.
func (z *Zone) Remove(name string) {
	z.t.Helper()
	z.control("", "local_data_remove", name)
}
