package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's utime and stime. USER_HZ is 100 on every Linux
// architecture Go supports (the kernel exports it as a constant, not a tunable).
const clockTick = 10 * time.Millisecond

// statTimes parses one /proc/PID/stat line: the parent pid and utime+stime.
func statTimes(line []byte) (ppid int, cpu time.Duration, err error) {
	// The command name (field 2) is in parentheses and may contain spaces: split after it.
	i := bytes.LastIndexByte(line, ')')
	if i < 0 {
		return 0, 0, errors.New("lab: malformed stat line")
	}
	f := strings.Fields(string(line[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, errors.New("lab: short stat line")
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, fmt.Errorf("lab: malformed stat line: %w", err)
	}
	return ppid, time.Duration(ut+st) * clockTick, nil
}

// TreeCPU returns the CPU time (user + system) used so far by pid and all its descendants,
// as nginx's master and worker or HAProxy's threads would be counted.
func TreeCPU(pid int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	kids := map[int][]int{}
	cpu := map[int]time.Duration{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		ppid, c, err := statTimes(b)
		if err != nil {
			continue
		}
		kids[ppid] = append(kids[ppid], p)
		cpu[p] = c
	}
	if _, ok := cpu[pid]; !ok {
		return 0, fmt.Errorf("lab: process %d not found", pid)
	}
	var total time.Duration
	seen := map[int]bool{}
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		total += cpu[p]
		stack = append(stack, kids[p]...)
	}
	return total, nil
}

// child is a process the lab started: a proxy or a backend process. Its output is kept for
// error messages.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	err  error // set before done closes
}

// lockedBuffer collects a child's output; it keeps the last 64 KiB.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 64<<10 {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-64<<10:]...)
	}
	b.mu.Unlock()
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// startChild starts name with args; env entries are added to the lab's environment. If
// ready is set, startChild waits (up to wait) until ready accepts a line of the child's
// standard output and returns what ready returned.
func startChild(ctx context.Context, name string, args, env []string, dir string, wait time.Duration, ready func(line string) (string, bool)) (*child, string, error) {
	c := &child{name: filepath.Base(name), out: &lockedBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(name, args...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Dir = dir
	c.cmd.Stderr = c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the lab
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("lab: starting %s: %w", name, err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := ready == nil
		for sc.Scan() {
			line := sc.Text()
			_, _ = c.out.Write([]byte(line + "\n"))
			if !sent {
				if v, ok := ready(line); ok {
					found <- v
					sent = true
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	if ready == nil {
		return c, "", nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case v := <-found:
		return c, v, nil
	case <-c.done:
		return nil, "", fmt.Errorf("lab: %s exited before it was ready (%v): %s", c.name, c.err, lastLines(c.out.String(), 8))
	case <-timer.C:
	case <-ctx.Done():
	}
	c.stop()
	return nil, "", fmt.Errorf("lab: %s not ready within %v: %s", c.name, wait, lastLines(c.out.String(), 8))
}

// cpu returns the CPU time of the child's process tree so far.
func (c *child) cpu() (time.Duration, error) { return TreeCPU(c.cmd.Process.Pid) }

// exited reports whether the child has ended, and why.
func (c *child) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// stop asks the child to end (SIGTERM), then kills it after a grace period.
func (c *child) stop() {
	if c == nil {
		return
	}
	if ok, _ := c.exited(); ok {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// lastLines returns the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
