#!/bin/bash
# h1tlsb.sh NEW_BIN OLD_BIN [REPS] [SECS] [CONNS]: CPU per request of HTTP keep-alive requests
# forwarded to backends over TLS (a pool with `tls`): a plain listener in front, two nginx
# HTTPS backends (a 44-byte page, TLS 1.3, ECDSA P-256) behind. NEW_BIN's and OLD_BIN's
# `ballast serve` and HAProxy (one thread, `ssl verify none`, `http-reuse always`),
# interleaved in every repetition; `wrk -t1 -cCONNS -dSECS http://…` against each in turn,
# utime+stime of each proxy over the requests wrk counted (the shared tools' procstat).
# Medians of REPS. Ports 27130-27131 (backends), 27140-27142 (proxies). Run it under
# `flock /work/notes/bench.lock`. Needs wrk, nginx, haproxy, openssl, python3.
set -u
NEW=$(readlink -f "$1"); OLD=$(readlink -f "$2"); REPS=${3:-5}; SECS=${4:-4}; C=${5:-16}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=backend.test \
  -addext "subjectAltName=DNS:backend.test" -keyout "$w/key.pem" -out "$w/cert.pem" >/dev/null 2>&1
mkdir -p "$w/nginx"
cat >"$w/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $w/nginx.pid;
error_log $w/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $w/nginx; proxy_temp_path $w/nginx; fastcgi_temp_path $w/nginx;
  uwsgi_temp_path $w/nginx; scgi_temp_path $w/nginx;
  keepalive_requests 1000000;
  ssl_certificate $w/cert.pem; ssl_certificate_key $w/key.pem; ssl_protocols TLSv1.3;
  server { listen 127.0.0.1:27130 ssl; location / { return 200 "<html><body><h1>It works!</h1></body></html>"; } }
  server { listen 127.0.0.1:27131 ssl; location / { return 200 "<html><body><h1>It works!</h1></body></html>"; } }
}
EOF
nginx -p "$w" -c "$w/nginx.conf" >"$w/nginx.log" 2>&1 & pids+=($!)
conf() { # port
  printf 'listeners:\n  - name: web\n    address: 127.0.0.1:%s\n' $1
  printf 'pools:\n  - name: p\n    balancer: roundrobin\n    tls: {ca: "%s", server_name: backend.test}\n' "$w/cert.pem"
  printf '    backends:\n      - address: 127.0.0.1:27130\n      - address: 127.0.0.1:27131\n'
  printf 'logging:\n  level: warn\n'
}
conf 27140 >"$w/new.yaml"; conf 27141 >"$w/old.yaml"
"$NEW" serve -c "$w/new.yaml" >"$w/pn.log" 2>&1 & pn=$!; pids+=($pn)
"$OLD" serve -c "$w/old.yaml" >"$w/po.log" 2>&1 & po=$!; pids+=($po)
printf 'global\n    nbthread 1\n    maxconn 9000\ndefaults\n    mode http\n    option http-keep-alive\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend fe\n    bind 127.0.0.1:27142\n    default_backend be\nbackend be\n    balance roundrobin\n    http-reuse always\n    server a 127.0.0.1:27130 ssl verify none sni str(backend.test) alpn http/1.1\n    server b 127.0.0.1:27131 ssl verify none sni str(backend.test) alpn http/1.1\n' >"$w/h.cfg"
haproxy -f "$w/h.cfg" -db >"$w/h.log" 2>&1 & ph=$!; pids+=($ph)
for port in 27140 27141 27142; do
  for i in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
  curl -sf -o /dev/null http://127.0.0.1:$port/ || { echo "proxy on $port does not answer"; cat "$w"/*.log; exit 1; }
done
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
run() { # pid port -> µs/req
  local t0 t1 out reqs
  t0=$(ticks $1)
  out=$(wrk -t1 -c$C -d${SECS}s http://127.0.0.1:$2/ 2>&1)
  t1=$(ticks $1)
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
N=(); O=(); H=()
for r in $(seq 1 $REPS); do N+=($(run $pn 27140)); O+=($(run $po 27141)); H+=($(run $ph 27142)); done
printf 'tls backends c=%d: new %s µs/req, old %s, haproxy %s; new/haproxy %s, old/haproxy %s   runs: %s | %s | %s\n' $C \
  $(median "${N[@]}") $(median "${O[@]}") $(median "${H[@]}") \
  $(awk -v a=$(median "${N[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') \
  $(awk -v a=$(median "${O[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') "${N[*]}" "${O[*]}" "${H[*]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
