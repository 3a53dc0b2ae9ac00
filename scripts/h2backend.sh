#!/bin/bash
# h2backend.sh BALLAST_BIN [REPS] [N] [BALLAST_BIN2]: proxy CPU-microseconds per request to
# HTTP/2 backends (a pool with protocol h2c) vs HAProxy (one thread, `proto h2` servers):
# two nginx backends serving 44 bytes over h2c (prior knowledge), clients h2load over h2c
# (-c 16 -m 10) and over HTTP/1.1 (--h1 -c 16). Runs interleaved (HAProxy, Ballast,
# Ballast2, ...), CPU utime+stime of each proxy from /proc (procstat.py of the shared peers
# tools); medians of REPS runs and the ratios to HAProxy. BALLAST_BIN2 (say a build before
# 2026-12-02, where h2proxy served h2c pools) runs beside on its own ports. Fixed ports: run it under
# `flock /work/notes/bench.lock`. The HTTP/1.1 row has no comparison for builds before
# 2026-12-02 (their fasthttp plane spoke HTTP/1.1 to h2c pools, which these h2c-only backends
# refuse: nan), and HAProxy's
# answers to h2load --h1 through its h2 servers count as failed here (nan; curl gets them).
# TLS=1: the backends speak HTTP/2 over TLS instead (nginx `ssl http2`, a self-signed
# certificate; Ballast's pool `protocol: h2` with insecure_skip_verify, HAProxy's servers
# `ssl verify none alpn h2`); BALLAST_BIN2 is then, say, a build where h2proxy served h2 pools.
set -u
TLS=${TLS:-0}
BIN=$(readlink -f "$1"); REPS=${2:-5}; N=${3:-40000}; BIN2=${4:+$(readlink -f "$4")}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
for c in haproxy nginx h2load curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); bp=; hp=; lp=; lp2=
chmod 755 "$w"
trap 'kill $bp $hp $lp $lp2 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/html" "$w/tmp"
bssl= hssl= bproto=h2c btls= sslconf=
if [ "$TLS" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=backend.test \
    -keyout "$w/key.pem" -out "$w/cert.pem" 2>/dev/null || { echo "openssl failed"; exit 2; }
  bssl=" ssl"; hssl=" ssl verify none alpn h2"; bproto=h2; btls="tls: {insecure_skip_verify: true}"
  sslconf="ssl_certificate $w/cert.pem; ssl_certificate_key $w/key.pem; ssl_session_cache shared:SSL:1m;"
fi
printf '<html><body><h1>It works!</h1></body></html>' | head -c 44 >"$w/html/index.html"

cat >"$w/nginx.conf" <<CFG
worker_processes 1;
daemon off;
pid backends.pid;
error_log stderr warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    access_log off;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    http2_max_concurrent_streams 128;
    types { text/html html; }
    default_type text/html;
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    $sslconf
    server { listen 127.0.0.1:28381$bssl http2; root html; }
    server { listen 127.0.0.1:28382$bssl http2; root html; }
}
CFG
nginx -p "$w/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & bp=$!

cat >"$w/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 9000
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    maxconn 9000
frontend h2c
    bind 127.0.0.1:28391 proto h2 backlog 4096
    default_backend be
frontend h1
    bind 127.0.0.1:28392 backlog 4096
    default_backend be
backend be
    balance roundrobin
    http-reuse always
    server s1 127.0.0.1:28381 proto h2$hssl
    server s2 127.0.0.1:28382 proto h2$hssl
CFG
haproxy -f "$w/haproxy.cfg" -db >"$w/haproxy.log" 2>&1 & hp=$!

cat >"$w/ballast.yaml" <<CFG
listeners:
  - {name: h2c, address: "127.0.0.1:28393", h2c: true}
  - {name: h1, address: "127.0.0.1:28394"}
pools:
  - name: be
    protocol: $bproto
    backends: [{address: "127.0.0.1:28381"}, {address: "127.0.0.1:28382"}]
    $btls
CFG
"$BIN" serve -c "$w/ballast.yaml" >"$w/ballast.log" 2>&1 & lp=$!
if [ -n "$BIN2" ]; then
  sed -e 's/28393/28395/; s/28394/28396/' "$w/ballast.yaml" >"$w/ballast2.yaml"
  "$BIN2" serve -c "$w/ballast2.yaml" >"$w/ballast2.log" 2>&1 & lp2=$!
fi
bscheme=http; [ "$TLS" = 1 ] && bscheme=https
for port in 28381 28382; do
  for i in $(seq 1 100); do curl -sk --http2-prior-knowledge -o /dev/null "$bscheme://127.0.0.1:$port/" && break; sleep 0.1; done
done
for port in 28391 28393 ${BIN2:+28395}; do
  for i in $(seq 1 100); do curl -s --http2-prior-knowledge -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done
for port in 28392 28394 ${BIN2:+28396}; do
  for i in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done

hz=$(getconf CLK_TCK)
measure() { # pid url h2load-args... -> µs/req (nan unless every request got a 2xx)
  local pid=$1 url=$2; shift 2
  local t0 t1 out ok
  t0=$(python3 "$shared/procstat.py" $pid | cut -d' ' -f1)
  out=$(h2load -n "$N" "$@" "$url" 2>/dev/null)
  t1=$(python3 "$shared/procstat.py" $pid | cut -d' ' -f1)
  ok=$(awk '/^status codes:/ {print $3}' <<<"$out")
  awk -v a=$t0 -v b=$t1 -v r=${ok:-0} -v n=$N -v hz=$hz 'BEGIN{ if (r==n) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
ratio() { awk -v b=$1 -v h=$2 'BEGIN{ if (h>0 && b==b) printf "%.2f", b/h; else print "nan" }'; }
printf '%-22s %10s %11s %10s %7s %7s   %s\n' load "ballast µs" "ballast2 µs" "haproxy µs" "b/h" "b2/h" "runs (ballast | ballast2 | haproxy)"
for front in h2c h1; do
  if [ $front = h2c ]; then H=http://127.0.0.1:28391/ B=http://127.0.0.1:28393/ B2=http://127.0.0.1:28395/ load="-c 16 -m 10"
  else H=http://127.0.0.1:28392/ B=http://127.0.0.1:28394/ B2=http://127.0.0.1:28396/ load="--h1 -c 16"; fi
  RB=(); RB2=(); RH=()
  for r in $(seq 1 $REPS); do
    RH+=($(measure $hp $H $load)); RB+=($(measure $lp $B $load))
    [ -n "$BIN2" ] && RB2+=($(measure $lp2 $B2 $load))
  done
  mb=$(median "${RB[@]}"); mh=$(median "${RH[@]}"); mb2=nan
  [ -n "$BIN2" ] && mb2=$(median "${RB2[@]}")
  printf '%-22s %10s %11s %10s %7s %7s   %s\n' "$front $load" "$mb" "$mb2" "$mh" "$(ratio $mb $mh)" "$(ratio $mb2 $mh)" "${RB[*]} | ${RB2[*]:-} | ${RH[*]}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
