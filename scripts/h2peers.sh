#!/bin/bash
# h2peers.sh BALLAST_BIN [REPS] [N] [BALLAST_BIN2]: proxy CPU-microseconds per request of Ballast's HTTP/2 plane
# vs HAProxy (one thread) vs nginx (one worker), HTTP/2 clients (h2load) over TLS (ALPN h2) and
# over h2c (prior knowledge), round robin over two nginx backends serving 44 bytes over
# HTTP/1.1 (the same backends for all three). Loads, N requests each:
#   h2load -c 16 -m 10    16 connections, 10 concurrent streams each
#   h2load -c 256 -m 1    256 connections, one stream each
# Runs are interleaved (HAProxy, nginx, Ballast, HAProxy, ...); CPU is utime+stime of the proxy's
# processes from /proc (procstat.py of the shared peers tools, next to the repository). Prints
# one row per load and front end with medians of REPS runs and the ratio Ballast / HAProxy.
# With BALLAST_BIN2 (say, main's build), a second Ballast runs beside the first on its own
# ports and joins the interleaving: a before/after comparison in one run.
# Needs: haproxy nginx h2load curl openssl python3 (apt-get install -y haproxy nginx
# nghttp2-client curl openssl).
set -u
BIN=$(readlink -f "$1"); REPS=${2:-5}; N=${3:-40000}; BIN2=${4:+$(readlink -f "$4")}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
for c in haproxy nginx h2load curl openssl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

w=$(mktemp -d); bp=; hp=; np=; lp=; lp2=
chmod 755 "$w" # nginx workers must read it (see peers.sh)
trap 'kill $bp $hp $np $lp $lp2 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/html" "$w/tmp" "$w/ptmp"; printf '<html><body><h1>It works!</h1></body></html>' | head -c 44 >"$w/html/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$w/key.pem" -out "$w/cert.pem" 2>/dev/null
cat "$w/cert.pem" "$w/key.pem" >"$w/haproxy.pem"

# Backends: the shared nginx backends on other ports.
sed -e 's/18081/28281/; s/18082/28282/' "$shared/nginx-backends.conf" >"$w/nginx.conf"
nginx -p "$w/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & bp=$!

# HAProxy, one thread: TLS with ALPN h2 on 28290, h2c on 28291.
cat >"$w/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 9000
    tune.ssl.default-dh-param 2048
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    maxconn 9000
frontend tls
    bind 127.0.0.1:28290 ssl crt $w/haproxy.pem alpn h2,http/1.1 backlog 4096
    default_backend be
frontend h2c
    bind 127.0.0.1:28291 proto h2 backlog 4096
    default_backend be
backend be
    balance roundrobin
    http-reuse always
    server s1 127.0.0.1:28281
    server s2 127.0.0.1:28282
CFG
haproxy -f "$w/haproxy.cfg" -db >"$w/haproxy.log" 2>&1 & hp=$!

# nginx as the proxy, one worker: TLS + h2 on 28294, h2c on 28295.
cat >"$w/proxy.conf" <<CFG
worker_processes 1;
daemon off;
pid proxy.pid;
error_log stderr warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path ptmp/client_body;
    proxy_temp_path ptmp/proxy;
    fastcgi_temp_path ptmp/fastcgi;
    uwsgi_temp_path ptmp/uwsgi;
    scgi_temp_path ptmp/scgi;
    keepalive_requests 1000000;
    http2_max_requests 1000000;
    upstream be { server 127.0.0.1:28281; server 127.0.0.1:28282; keepalive 512; }
    server {
        listen 127.0.0.1:28294 ssl http2 backlog=4096;
        listen 127.0.0.1:28295 http2 backlog=4096;
        ssl_certificate $w/cert.pem;
        ssl_certificate_key $w/key.pem;
        location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CFG
nginx -p "$w/" -c "$w/proxy.conf" -e stderr >"$w/proxy.log" 2>&1 & np=$!

# Ballast: TLS on 28292, h2c on 28293, the same backends over HTTP/1.1.
cat >"$w/ballast.yaml" <<CFG
listeners:
  - {name: tls, address: "127.0.0.1:28292", tls: {cert: $w/cert.pem, key: $w/key.pem}}
  - {name: h2c, address: "127.0.0.1:28293", h2c: true}
pools:
  - name: be
    backends: [{address: "127.0.0.1:28281"}, {address: "127.0.0.1:28282"}]
CFG
"$BIN" serve -c "$w/ballast.yaml" >"$w/ballast.log" 2>&1 & lp=$!
if [ -n "$BIN2" ]; then # the second Ballast: TLS on 28296, h2c on 28297
  sed -e 's/28292/28296/; s/28293/28297/' "$w/ballast.yaml" >"$w/ballast2.yaml"
  "$BIN2" serve -c "$w/ballast2.yaml" >"$w/ballast2.log" 2>&1 & lp2=$!
fi
ports_tls="28290 28292 28294"; ports_h2c="28291 28293 28295"
[ -n "$BIN2" ] && ports_tls="$ports_tls 28296" && ports_h2c="$ports_h2c 28297"

for url in http://127.0.0.1:28281/ http://127.0.0.1:28282/; do
  for i in $(seq 1 100); do curl -s -o /dev/null "$url" && break; sleep 0.1; done
done
for port in $ports_tls; do
  for i in $(seq 1 100); do curl -sk --http2 -o /dev/null "https://127.0.0.1:$port/" && break; sleep 0.1; done
done
for port in $ports_h2c; do
  for i in $(seq 1 100); do curl -s --http2-prior-knowledge -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
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
if [ -z "$BIN2" ]; then
  printf '%-26s %10s %10s %10s %7s   %s\n' load "ballast µs" "haproxy µs" "nginx µs" "b/h" "runs (ballast | haproxy | nginx)"
else
  printf '%-26s %10s %10s %10s %10s %7s %7s   %s\n' load "ballast µs" "ballast2 µs" "haproxy µs" "nginx µs" "b/h" "b2/h" "runs (ballast | ballast2 | haproxy | nginx)"
fi
for front in tls h2c; do
  if [ $front = tls ]; then H=https://127.0.0.1:28290/ B=https://127.0.0.1:28292/ X=https://127.0.0.1:28294/ B2=https://127.0.0.1:28296/
  else H=http://127.0.0.1:28291/ B=http://127.0.0.1:28293/ X=http://127.0.0.1:28295/ B2=http://127.0.0.1:28297/; fi
  for load in "-c 16 -m 10" "-c 256 -m 1"; do
    RB=(); RB2=(); RH=(); RX=()
    for r in $(seq 1 $REPS); do
      RH+=($(measure $hp $H $load)); RX+=($(measure $np $X $load)); RB+=($(measure $lp $B $load))
      [ -n "$BIN2" ] && RB2+=($(measure $lp2 $B2 $load))
    done
    mb=$(median "${RB[@]}"); mh=$(median "${RH[@]}"); mx=$(median "${RX[@]}")
    if [ -z "$BIN2" ]; then
      printf '%-26s %10s %10s %10s %7s   %s\n' "$front h2load $load" "$mb" "$mh" "$mx" "$(ratio $mb $mh)" "${RB[*]} | ${RH[*]} | ${RX[*]}"
    else
      mb2=$(median "${RB2[@]}")
      printf '%-26s %10s %10s %10s %10s %7s %7s   %s\n' "$front h2load $load" "$mb" "$mb2" "$mh" "$mx" "$(ratio $mb $mh)" "$(ratio $mb2 $mh)" "${RB[*]} | ${RB2[*]} | ${RH[*]} | ${RX[*]}"
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
