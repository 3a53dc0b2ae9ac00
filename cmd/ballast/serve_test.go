package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ballast/internal/testbin"
)

// e2eBin is the ballast binary TestMain builds once; end-to-end tests run it as a real
// process so that signals, exit codes and output are what an operator sees.
var e2eBin string

func TestMain(m *testing.M) { testbin.Main(m, "ballast/cmd/ballast", &e2eBin) }

// e2eWait bounds every wait for the process; it is a hang detector, not a timing assumption.
const e2eWait = 30 * time.Second

// e2eProc is a running ballast process with its output collected line by line.
type e2eProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	cond *sync.Cond
	out  []string // stdout lines
	err  []string // stderr lines
	done bool
	exit chan int
}

// e2eStart runs ballast with args; the process is killed at the end of the test if still alive.
func e2eStart(t *testing.T, args ...string) *e2eProc {
	t.Helper()
	return e2eStartCmd(t, exec.Command(e2eBin, args...))
}

// e2eStartCmd is e2eStart for a command that runs ballast some other way (under prlimit).
func e2eStartCmd(t *testing.T, cmd *exec.Cmd) *e2eProc {
	t.Helper()
	args := cmd.Args[1:]
	p := &e2eProc{t: t, cmd: cmd, exit: make(chan int, 1)}
	p.cond = sync.NewCond(&p.mu)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go p.collect(stdout, &p.out, &readers)
	go p.collect(stderr, &p.err, &readers)
	go func() {
		readers.Wait()
		err := p.cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		p.mu.Lock()
		p.done = true
		p.cond.Broadcast()
		p.mu.Unlock()
		p.exit <- code
	}()
	// A timer wakes waiters so that a missing line fails the test instead of hanging it.
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.mu.Lock()
				p.cond.Broadcast()
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exit:
		case <-time.After(e2eWait):
		}
		if t.Failed() {
			t.Logf("ballast %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.lines(&p.out), p.lines(&p.err))
		}
	})
	return p
}

func (p *e2eProc) collect(r io.Reader, dst *[]string, wg *sync.WaitGroup) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		*dst = append(*dst, sc.Text())
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

func (p *e2eProc) lines(src *[]string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(*src, "\n")
}

// waitLine waits for a line of stdout (or stderr) matching re, after the first `from` lines,
// and returns its submatches and the index after it.
func (p *e2eProc) waitLine(stderr bool, from int, re *regexp.Regexp) ([]string, int) {
	p.t.Helper()
	deadline := time.Now().Add(e2eWait)
	p.mu.Lock()
	defer p.mu.Unlock()
	src := &p.out
	if stderr {
		src = &p.err
	}
	for {
		for i := from; i < len(*src); i++ {
			if m := re.FindStringSubmatch((*src)[i]); m != nil {
				return m, i + 1
			}
		}
		if p.done || time.Now().After(deadline) {
			p.t.Fatalf("no line matching %q (process exited: %v)", re, p.done)
		}
		p.cond.Wait()
	}
}

// errCount is how many stderr lines there are so far, to wait for lines after a signal.
func (p *e2eProc) errCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.err)
}

func (p *e2eProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait returns the exit code.
func (p *e2eProc) wait() int {
	p.t.Helper()
	select {
	case code := <-p.exit:
		p.exit <- code
		return code
	case <-time.After(e2eWait):
		p.t.Fatal("ballast did not exit")
		return -1
	}
}

var e2eServingRE = regexp.MustCompile(`^ballast: serving on (http://\S+).*$`)

// e2eBackend is a backend that counts the requests it answers.
type e2eBackend struct {
	*httptest.Server
	hits atomic.Int64
}

func e2eNewBackend(t *testing.T, name string) *e2eBackend {
	c := &e2eBackend{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		fmt.Fprintf(w, "%s\n", name)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *e2eBackend) addr() string { return strings.TrimPrefix(c.URL, "http://") }

// e2eClient is a keep-alive client with a bound on every request.
var e2eClient = &http.Client{Timeout: e2eWait, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// e2eGet fetches url and returns the body's first line and the status.
func e2eGet(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := e2eClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), resp.StatusCode
}

func e2eWriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// e2eSplit sends n requests and counts the answers by backend name.
func e2eSplit(t *testing.T, url string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		body, status := e2eGet(t, url)
		if status != http.StatusOK {
			t.Fatalf("status %d (%s)", status, body)
		}
		got[body]++
	}
	return got
}

// TestServeReload drives one process through a file config, reloads under load (adding a
// listener and changing the pool), a broken reload, and a reload removing the listener.
func TestServeReload(t *testing.T) {
	a, b := e2eNewBackend(t, "a"), e2eNewBackend(t, "b")
	dir := t.TempDir()
	file := filepath.Join(dir, "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - name: main
    address: 127.0.0.1:0
pools:
  - name: web
    balancer: roundrobin
    backends:
      - address: %s
        name: a
      - address: %s
        name: b
`, a.addr(), b.addr()))

	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1] + "/"

	if got := e2eSplit(t, url, 100); got["a"] != 50 || got["b"] != 50 {
		t.Fatalf("roundrobin over a and b: got %v, want 50/50", got)
	}

	// Reload under load: only b, plus a second listener. No request may fail.
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - name: main
    address: 127.0.0.1:0
  - name: extra
    address: 127.0.0.1:0
pools:
  - name: web
    backends:
      - address: %s
        name: b
`, b.addr()))
	var failed, sent atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for range 8 {
		load.Add(1)
		go func() {
			defer load.Done()
			for ctx.Err() == nil {
				resp, err := e2eClient.Get(url)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	for sent.Load() < 200 { // the load is running before the reload
		time.Sleep(time.Millisecond)
	}
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	atLoad := sent.Load()
	for sent.Load() < atLoad+200 { // and keeps running after it
		time.Sleep(time.Millisecond)
	}
	cancel()
	load.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed across the reload", failed.Load(), sent.Load())
	}
	if got := e2eSplit(t, url, 20); got["b"] != 20 {
		t.Errorf("after the reload everything should go to b: %v", got)
	}
	m, _ = p.waitLine(true, from, regexp.MustCompile(`msg="listener opened" listener=extra address=(\S+)`))
	extra := "http://" + m[1] + "/"
	if body, status := e2eGet(t, extra); status != 200 || body != "b" {
		t.Errorf("the added listener answered %d %q", status, body)
	}

	// A broken file: the error names file:line:col, and the previous config keeps serving.
	e2eWriteFile(t, file, "listeners:\n  - address: 127.0.0.1:0\npools:\n  - name: web\n    balancer: rr\n    backends:\n      - address: "+a.addr()+"\n")
	from = p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(regexp.QuoteMeta(file)+`:5:15: pools\[0\]\.balancer: unknown balancer \\"rr\\"`))
	p.waitLine(true, from, regexp.MustCompile(`configuration NOT reloaded`))
	if got := e2eSplit(t, url, 10); got["b"] != 10 {
		t.Errorf("after a broken reload the previous config should serve: %v", got)
	}

	// A valid reload that removes the extra listener and switches to a.
	e2eWriteFile(t, file, fmt.Sprintf("listeners:\n  - name: main\n    address: 127.0.0.1:0\npools:\n  - name: web\n    backends:\n      - address: %s\n        name: a\n", a.addr()))
	from = p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	p.waitLine(true, from, regexp.MustCompile(`msg="listener closed" listener=extra`))
	if got := e2eSplit(t, url, 10); got["a"] != 10 {
		t.Errorf("after the third reload everything should go to a: %v", got)
	}
	fresh := &http.Client{Timeout: e2eWait, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := fresh.Get(extra); err == nil {
		resp.Body.Close()
		t.Errorf("the removed listener still accepts connections")
	}

	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestServeGracefulShutdown: SIGTERM lets a request in progress finish, then exits 0.
func TestServeGracefulShutdown(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		fmt.Fprintln(w, "finished")
	}))
	defer slow.Close()
	defer close(release)

	p := e2eStart(t, "serve", "--listen", "127.0.0.1:0", "--backend", strings.TrimPrefix(slow.URL, "http://"), "--grace", "25s")
	m, _ := p.waitLine(false, 0, e2eServingRE)

	type result struct {
		body   string
		status int
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := e2eClient.Get(m[1] + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res <- result{strings.TrimSpace(string(b)), resp.StatusCode, nil}
	}()
	select {
	case <-started:
	case <-time.After(e2eWait):
		t.Fatal("the request never reached the backend")
	}
	p.signal(syscall.SIGTERM)
	p.waitLine(true, 0, regexp.MustCompile(`msg="shutting down`))
	// New connections are refused while the request in flight is still running.
	host := strings.TrimPrefix(m[1], "http://")
	for deadline := time.Now().Add(e2eWait); ; {
		c, err := net.Dial("tcp", host)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case code := <-p.exit:
		t.Fatalf("ballast exited (%d) with a request in flight", code)
	default:
	}
	release <- struct{}{}
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "finished" {
		t.Errorf("in-flight request: %d %q %v; want 200 finished", r.status, r.body, r.err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestServeQuickForm: no file, flags only; the pool is "default", backends named by address.
func TestServeQuickForm(t *testing.T) {
	a, b := e2eNewBackend(t, "a"), e2eNewBackend(t, "b")
	p := e2eStart(t, "serve", "--listen", "127.0.0.1:0", "--balancer", "sqf", "--backend", a.addr(), "--backend", b.addr(),
		"--max-conns", "4", "--max-queue", "16", "--queue-timeout", "5s", "--expose-backend")
	m, _ := p.waitLine(false, 0, e2eServingRE)
	if !strings.Contains(m[0], "pool default: sqf over 2 backends") {
		t.Errorf("start-up line %q does not describe the pool", m[0])
	}
	seen := map[string]bool{}
	for range 40 {
		resp, err := e2eClient.Get(m[1] + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		seen[resp.Header.Get("X-Ballast-Backend")] = true
	}
	if !seen[a.addr()] || !seen[b.addr()] || len(seen) != 2 {
		t.Errorf("X-Ballast-Backend values %v, want both backend addresses", seen)
	}
	if a.hits.Load()+b.hits.Load() != 40 {
		t.Errorf("backends counted %d+%d requests, want 40", a.hits.Load(), b.hits.Load())
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0", code)
	}
}

// TestServeBadInvocations: errors are reported with the right exit code and message.
func TestServeBadInvocations(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown balancer", []string{"--listen", "127.0.0.1:0", "--backend", "127.0.0.1:9", "--balancer", "rr"}, 1, `flags: pools[0].balancer: unknown balancer "rr"`},
		{"bad backend", []string{"--backend", "nowhere"}, 1, `flags: pools[0].backends[0].address: "nowhere" is not host:port`},
		{"no backend", []string{"--listen", "127.0.0.1:0"}, 2, "needs at least one --backend"},
		{"file and flags", []string{"-c", "x.yaml", "--backend", "127.0.0.1:9"}, 2, "not both"},
		{"missing file", []string{"-c", "/nonexistent/ballast.yaml"}, 1, "/nonexistent/ballast.yaml: open"},
		{"bad duration", []string{"--backend", "127.0.0.1:9", "--queue-timeout", "5"}, 2, "not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e2eStart(t, append([]string{"serve"}, tt.args...)...)
			if code := p.wait(); code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			if errs := p.lines(&p.err); !strings.Contains(errs, tt.want) {
				t.Errorf("stderr %q does not contain %q", errs, tt.want)
			}
		})
	}
}

// TestQuickFormConfig: the flags become the documented one-pool configuration.
func TestQuickFormConfig(t *testing.T) {
	q := quickForm{listen: "127.0.0.1:8080", balancer: "sqf", backends: stringList{"127.0.0.1:8081", "127.0.0.1:8082"},
		maxConns: 32, maxQueue: 100, exposeBackend: true}
	c, err := q.config()
	if err != nil {
		t.Fatal(err)
	}
	pl := c.Pools[0]
	switch {
	case pl.Name != "default" || pl.Balancer != "sqf" || pl.MaxConns != 32 || pl.MaxQueue != 100:
		t.Errorf("pool %+v", pl)
	case pl.QueueTimeout.Duration != 30*time.Second:
		t.Errorf("queue_timeout %v, want the 30s default", pl.QueueTimeout)
	case len(pl.Backends) != 2 || pl.Backends[1].Name != "127.0.0.1:8082" || pl.Backends[1].Weight != 1:
		t.Errorf("backends %+v", pl.Backends)
	case !c.Listeners[0].ExposeBackend || len(c.Routes) != 1 || c.Routes[0].Pool != "default":
		t.Errorf("listener %+v routes %+v", c.Listeners[0], c.Routes)
	}
	q.maxConns = 0
	if _, err := q.config(); err == nil || !strings.Contains(err.Error(), "flags: pools[0].max_queue: a backlog queue needs a connection limit") {
		t.Errorf("max-queue without max-conns: got %v", err)
	}
}

// TestServeReloadRollback: a valid file that cannot be installed (its new listener's port is
// taken) is rolled back whole: the pool change does not happen either.
func TestServeReloadRollback(t *testing.T) {
	a, b := e2eNewBackend(t, "a"), e2eNewBackend(t, "b")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf("listeners:\n  - address: 127.0.0.1:0\npools:\n  - name: web\n    backends:\n      - {address: %s, name: a}\n", a.addr()))
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1] + "/"

	e2eWriteFile(t, file, fmt.Sprintf("listeners:\n  - address: 127.0.0.1:0\n  - address: %s\npools:\n  - name: web\n    backends:\n      - {address: %s, name: b}\n", taken.Addr(), b.addr()))
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`configuration NOT reloaded.*address already in use`))
	if got := e2eSplit(t, url, 10); got["a"] != 10 {
		t.Errorf("after a failed install the previous pool should serve: %v", got)
	}
	if b.hits.Load() != 0 {
		t.Errorf("backend b of the rejected config got %d requests", b.hits.Load())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestServeHealthCheck: serve runs the pool's active health check; a backend failing it gets
// no traffic until it passes again.
func TestServeHealthCheck(t *testing.T) {
	a := e2eNewBackend(t, "a")
	var sick atomic.Bool
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "b")
	}))
	defer b.Close()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
pools:
  - name: web
    backends:
      - {address: %s, name: a}
      - {address: %s, name: b}
    health_check:
      path: /health
      interval: 50ms
      rise: 1
      fall: 1
`, a.addr(), strings.TrimPrefix(b.URL, "http://")))
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1] + "/"
	if got := e2eSplit(t, url, 10); got["a"] != 5 || got["b"] != 5 {
		t.Fatalf("both healthy: %v", got)
	}
	from := p.errCount()
	sick.Store(true)
	p.waitLine(true, from, regexp.MustCompile(`backend down \(health check\).*backend=b`))
	if got := e2eSplit(t, url, 10); got["a"] != 10 {
		t.Errorf("b is down: %v", got)
	}
	from = p.errCount()
	sick.Store(false)
	p.waitLine(true, from, regexp.MustCompile(`backend up \(health check\).*backend=b`))
	if got := e2eSplit(t, url, 10); got["b"] == 0 {
		t.Errorf("b is back up but got nothing: %v", got)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}
