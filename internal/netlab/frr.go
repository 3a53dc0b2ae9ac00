package netlab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// FRRDir is where Debian's frr package puts its daemons.
const FRRDir = "/usr/lib/frr"

// FRRMissing says why FRR cannot run here ("" when it can): the daemons and the frr user
// Debian's package creates.
func FRRMissing() string {
	for _, d := range []string{"zebra", "bgpd", "bfdd"} {
		if _, err := os.Stat(filepath.Join(FRRDir, d)); err != nil {
			return "FRR is not installed (apt-get install frr): " + err.Error()
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		return "FRR's vtysh is not installed: " + err.Error()
	}
	if _, err := user.Lookup("frr"); err != nil {
		return "FRR's user frr does not exist: " + err.Error()
	}
	return ""
}

// FRR is a router's zebra, bfdd and bgpd running in a node's namespace, each with its pid
// file, sockets and log in a directory of its own (never /etc/frr or /var/run/frr), started
// by StartFRR and stopped by Close (or the lab's Close).
type FRR struct {
	Dir   string
	procs []*exec.Cmd
	done  []chan struct{}
}

// StartFRR writes each daemon's configuration (bgpd's router bgp section, bfdd's bfd section:
// FRR's daemons stop reading a shared file at the other daemons' sections) and starts zebra,
// then bfdd and bgpd, in n's namespace, as user frr; it returns once bgpd answers vtysh.
func (l *Lab) StartFRR(n *Node, bgpd, bfdd string) (_ *FRR, err error) {
	if why := FRRMissing(); why != "" {
		return nil, errors.New(why)
	}
	dir, err := os.MkdirTemp("", "ballast-frr-")
	if err != nil {
		return nil, err
	}
	f := &FRR{Dir: dir}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	u, err := user.Lookup("frr")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	for daemon, conf := range map[string]string{"zebra": "ip forwarding\n", "bgpd": bgpd, "bfdd": bfdd} {
		cf := filepath.Join(dir, daemon+".conf")
		if err := os.WriteFile(cf, []byte("frr defaults traditional\n"+conf), 0o644); err != nil {
			return nil, err
		}
		if err := os.Chown(cf, uid, gid); err != nil {
			return nil, err
		}
	}
	zsock := filepath.Join(dir, "zserv.api")
	start := func(daemon string, extra ...string) error {
		args := append([]string{"-u", "frr", "-g", "frr", "-f", filepath.Join(dir, daemon+".conf"), "-i", filepath.Join(dir, daemon+".pid"),
			"-z", zsock, "--vty_socket", dir, "--log", "file:" + filepath.Join(dir, daemon+".log")}, extra...)
		cmd := exec.Command(filepath.Join(FRRDir, daemon), args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
		if err := l.Start(n.NS, cmd); err != nil {
			return fmt.Errorf("netlab: starting %s: %w", daemon, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		f.procs, f.done = append(f.procs, cmd), append(f.done, done)
		return nil
	}
	waitFor := func(path, daemon string) error {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(path); err == nil {
				return nil
			}
			select {
			case <-f.done[len(f.done)-1]:
				return fmt.Errorf("netlab: %s exited: %s", daemon, f.log(daemon))
			case <-time.After(20 * time.Millisecond):
			}
		}
		return fmt.Errorf("netlab: %s did not start within 10s: %s", daemon, f.log(daemon))
	}
	if err := start("zebra"); err != nil {
		return nil, err
	}
	if err := waitFor(zsock, "zebra"); err != nil {
		return nil, err
	}
	if err := start("bfdd", "--bfdctl", filepath.Join(dir, "bfdd.sock")); err != nil {
		return nil, err
	}
	if err := waitFor(filepath.Join(dir, "bfdd.vty"), "bfdd"); err != nil {
		return nil, err
	}
	if err := start("bgpd"); err != nil {
		return nil, err
	}
	if err := waitFor(filepath.Join(dir, "bgpd.vty"), "bgpd"); err != nil {
		return nil, err
	}
	l.OnClose(f.Close)
	return f, nil
}

func (f *FRR) log(daemon string) string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, daemon+".log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Vtysh runs FRR commands (each one -c) and returns their output.
func (f *FRR) Vtysh(cmds ...string) (string, error) {
	args := []string{"--vty_socket", f.Dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("vtysh %v: %w: %s", cmds, err, out)
	}
	return string(out), nil
}

// Close stops the daemons (SIGTERM, SIGKILL after 3 s) and removes the directory. It is safe
// to call more than once.
func (f *FRR) Close() {
	for i := len(f.procs) - 1; i >= 0; i-- {
		p := f.procs[i]
		if p.Process == nil {
			continue
		}
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-f.done[i]:
		case <-time.After(3 * time.Second):
			_ = p.Process.Kill()
			<-f.done[i]
		}
	}
	f.procs, f.done = nil, nil
	if f.Dir != "" {
		os.RemoveAll(f.Dir)
	}
}
