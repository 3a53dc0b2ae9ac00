#!/bin/bash
# h1zip.sh NEW_BIN OLD_BIN [REPS] [SECS] [CONNS]: CPU per request of compressed responses (a
# 6.4 KB HTML page from one nginx, compressed by the proxy for `Accept-Encoding: $ENC`,
# gzip by default, br for brotli): NEW_BIN's and OLD_BIN's `ballast serve` (a route with
# compress) and, for gzip, HAProxy (one thread, `compression algo gzip`), interleaved in every
# repetition; `wrk -t1 -cCONNS -dSECS` against each in turn, utime+stime of each proxy over
# the requests wrk counted (the shared tools' procstat). Medians of REPS, and the coded size
# each sends. Ports 27120 (nginx), 27121-27123 (proxies). Run it under
# `flock /work/notes/bench.lock`. Needs wrk, nginx, haproxy, curl, python3.
set -u
NEW=$(readlink -f "$1"); OLD=$(readlink -f "$2"); REPS=${3:-5}; SECS=${4:-4}; C=${5:-16}
ENC=${ENC:-gzip}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/www" "$w/logs"; chmod 755 "$w" "$w/www" # nginx's workers read the page
python3 - >"$w/www/page.html" <<'PY'
import random
r = random.Random(1)
words = [''.join(r.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(r.randint(2, 9))) for _ in range(300)]
out = []
while sum(map(len, out)) < 6300:
    out.append('<p>' + ' '.join(r.choice(words) for _ in range(12)) + '</p>\n')
print(''.join(out)[:6400], end='')
PY
cat >"$w/nginx.conf" <<NGX
worker_processes 1;
error_log $w/logs/error.log;
pid $w/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:27120; root $w/www; location / { default_type text/html; } }
}
NGX
nginx -p "$w" -c "$w/nginx.conf" -g 'daemon off;' >"$w/ngx.log" 2>&1 & pids+=($!)
conf() { # port
  printf 'listeners:\n  - name: web\n    address: 127.0.0.1:%s\n' $1
  printf 'pools:\n  - name: p\n    backends:\n      - address: 127.0.0.1:27120\n'
  printf 'routes:\n  - pool: p\n    compress: {types: [text/html], algorithms: [%s]}\n' "$ENC"
  printf 'logging:\n  level: warn\n'
}
conf 27121 >"$w/new.yaml"; conf 27122 >"$w/old.yaml"
"$NEW" serve -c "$w/new.yaml" >"$w/pn.log" 2>&1 & pn=$!; pids+=($pn)
"$OLD" serve -c "$w/old.yaml" >"$w/po.log" 2>&1 & po=$!; pids+=($po)
ports="27121 27122"
if [ "$ENC" = gzip ]; then
  printf 'global\n    nbthread 1\n    maxconn 9000\ndefaults\n    mode http\n    option http-keep-alive\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend fe\n    bind 127.0.0.1:27123\n    default_backend be\nbackend be\n    http-reuse always\n    compression algo gzip\n    compression type text/html\n    server a 127.0.0.1:27120\n' >"$w/h.cfg"
  haproxy -f "$w/h.cfg" -db >"$w/h.log" 2>&1 & ph=$!; pids+=($ph)
  ports="$ports 27123"
fi
for port in 27120 $ports; do
  for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:$port/page.html && break; sleep 0.1; done
done
for port in $ports; do
  printf 'port %s: %s\n' $port "$(curl -s -H "Accept-Encoding: $ENC" -o /dev/null -w '%{http_code}, %{size_download} bytes coded of 6365' http://127.0.0.1:$port/page.html) $(curl -s -D - -o /dev/null -H "Accept-Encoding: $ENC" http://127.0.0.1:$port/page.html | tr -d '\r' | grep -i '^content-encoding')"
done
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
run() { # pid port -> µs/req
  local t0 t1 out reqs
  t0=$(ticks $1)
  out=$(wrk -t1 -c$C -d${SECS}s -H "Accept-Encoding: $ENC" http://127.0.0.1:$2/page.html 2>&1)
  t1=$(ticks $1)
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
N=(); O=(); H=()
for r in $(seq 1 $REPS); do
  N+=($(run $pn 27121)); O+=($(run $po 27122))
  if [ "$ENC" = gzip ]; then H+=($(run $ph 27123)); fi
done
printf '%s c=%d: new %s µs/req, old %s; new/old %s   runs: %s | %s\n' "$ENC" $C $(median "${N[@]}") $(median "${O[@]}") \
  $(awk -v a=$(median "${N[@]}") -v b=$(median "${O[@]}") 'BEGIN{printf "%.2f", a/b}') "${N[*]}" "${O[*]}"
if [ "$ENC" = gzip ]; then
  printf 'haproxy %s µs/req; new/haproxy %s, old/haproxy %s   runs: %s\n' $(median "${H[@]}") \
    $(awk -v a=$(median "${N[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') \
    $(awk -v a=$(median "${O[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') "${H[*]}"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
