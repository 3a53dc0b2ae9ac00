package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Peer is another proxy the peers scenario measures beside Ballast: round robin over the same
// backends, keep-alive to them, one worker thread.
type Peer struct {
	Name    string
	Binary  string   // looked up on PATH
	Version []string // arguments that make the binary print its version
	start   func(ctx context.Context, bin string, backends []Target) (Proxy, error)
}

// Peers lists the proxies the peers scenario tries, in the order it interleaves them.
func Peers() []Peer {
	return []Peer{
		{Name: "haproxy", Binary: "haproxy", Version: []string{"-v"}, start: startHAProxy},
		{Name: "nginx", Binary: "nginx", Version: []string{"-v"}, start: startNginx},
		{Name: "caddy", Binary: "caddy", Version: []string{"version"}, start: startCaddy},
	}
}

// Available reports the peer's binary path, or an error saying it is not installed.
func (p Peer) Available() (string, error) {
	path, err := exec.LookPath(p.Binary)
	if err != nil {
		return "", fmt.Errorf("%s not installed (apt-get install %s)", p.Name, p.Binary)
	}
	return path, nil
}

// VersionLine returns the first line the peer prints about its version, for the report.
func (p Peer) VersionLine() string {
	bin, err := p.Available()
	if err != nil {
		return ""
	}
	out, _ := exec.Command(bin, p.Version...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// Start runs the peer in front of backends.
func (p Peer) Start(ctx context.Context, backends []Target) (Proxy, error) {
	bin, err := p.Available()
	if err != nil {
		return nil, err
	}
	return p.start(ctx, bin, backends)
}

// peerStartWait bounds a peer's start-up.
const peerStartWait = 15 * time.Second

// startPeer writes the configuration files, starts the process and waits until it listens.
func startPeer(ctx context.Context, name, bin string, files map[string]string, args func(dir string) []string, env []string, port int) (Proxy, error) {
	dir, err := os.MkdirTemp("", "ballast-lab-"+name+"-")
	if err != nil {
		return nil, err
	}
	for f, content := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(content, "@DIR@", dir)), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	for i, e := range env {
		env[i] = strings.ReplaceAll(e, "@DIR@", dir)
	}
	c, _, err := startChild(ctx, bin, args(dir), env, dir, 0, nil)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &procProxy{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), c: c, dir: dir}
	if err := waitListening(ctx, p, peerStartWait); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// haproxyConfig follows /work/shared/tools/peers/haproxy.cfg: one thread, keep-alive both ways,
// idle backend connections shared (http-reuse always), no logging.
func haproxyConfig(port int, backends []Target) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    nbthread 1
    maxconn 9000

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    maxconn 9000

frontend fe
    bind 127.0.0.1:%d backlog 4096
    default_backend be

backend be
    balance roundrobin
    http-reuse always
`, port)
	for i, t := range backends {
		fmt.Fprintf(&b, "    server s%d %s\n", i+1, t.Addr)
	}
	return b.String()
}

func startHAProxy(ctx context.Context, bin string, backends []Target) (Proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	files := map[string]string{"haproxy.cfg": haproxyConfig(port, backends)}
	return startPeer(ctx, "haproxy", bin, files, func(dir string) []string {
		return []string{"-f", filepath.Join(dir, "haproxy.cfg"), "-db"}
	}, nil, port)
}

// nginxConfig: one worker process, an upstream block with keep-alive connections (HTTP/1.1 and
// an empty Connection header, as nginx requires for upstream keep-alive), no access log.
func nginxConfig(port int, backends []Target) string {
	var b strings.Builder
	b.WriteString(`worker_processes 1;
daemon off;
pid @DIR@/nginx.pid;
error_log stderr warn;
worker_rlimit_nofile 8192;

events {
    worker_connections 4096;
}

http {
    access_log off;
    keepalive_requests 100000;
    keepalive_timeout 65;
    client_body_temp_path @DIR@/tmp/client_body;
    proxy_temp_path @DIR@/tmp/proxy;
    fastcgi_temp_path @DIR@/tmp/fastcgi;
    uwsgi_temp_path @DIR@/tmp/uwsgi;
    scgi_temp_path @DIR@/tmp/scgi;

    upstream be {
`)
	for _, t := range backends {
		fmt.Fprintf(&b, "        server %s;\n", t.Addr)
	}
	fmt.Fprintf(&b, `        keepalive 64;
        keepalive_requests 100000;
    }

    server {
        listen 127.0.0.1:%d backlog=4096;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`, port)
	return b.String()
}

func startNginx(ctx context.Context, bin string, backends []Target) (Proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	files := map[string]string{"nginx.conf": nginxConfig(port, backends), "tmp/.keep": ""}
	return startPeer(ctx, "nginx", bin, files, func(dir string) []string {
		return []string{"-p", dir + "/", "-c", filepath.Join(dir, "nginx.conf"), "-e", "stderr"}
	}, nil, port)
}

// caddyConfig: the admin endpoint off (so that runs do not collide on its port), no automatic
// HTTPS, round robin; Caddy keeps upstream connections alive by default.
func caddyConfig(port int, backends []Target) string {
	addrs := make([]string, len(backends))
	for i, t := range backends {
		addrs[i] = t.Addr
	}
	return fmt.Sprintf(`{
	admin off
	auto_https off
}

http://127.0.0.1:%d {
	bind 127.0.0.1
	reverse_proxy %s {
		lb_policy round_robin
	}
}
`, port, strings.Join(addrs, " "))
}

func startCaddy(ctx context.Context, bin string, backends []Target) (Proxy, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	files := map[string]string{"Caddyfile": caddyConfig(port, backends)}
	return startPeer(ctx, "caddy", bin, files, func(dir string) []string {
		return []string{"run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile"}
	}, []string{"GOMAXPROCS=1", "HOME=@DIR@", "XDG_DATA_HOME=@DIR@", "XDG_CONFIG_HOME=@DIR@"}, port)
}
