#!/bin/bash
# h1tls.sh NEW_BIN OLD_BIN [REPS] [SECS] [CONNS]: CPU per request of HTTPS keep-alive requests
# (TLS terminated by the proxy, a 44-byte page from two `ballast backend` ports behind it):
# NEW_BIN's and OLD_BIN's `ballast serve` with a TLS listener, and HAProxy (one thread, `ssl
# crt`), interleaved in every repetition; `wrk -t1 -cCONNS -dSECS https://…` against each in
# turn, utime+stime of each proxy over the requests wrk counted (the shared tools' procstat).
# Medians of REPS. CLOSE=N measures a new TLS connection per request instead (`ab -c CONNS -n
# N`, full handshake each: ECDHE P-256, ECDSA). Ports 27100-27101 (backends), 27110-27112 (proxies). Run it under
# `flock /work/notes/bench.lock`. Needs wrk, haproxy, openssl, python3.
set -u
NEW=$(readlink -f "$1"); OLD=$(readlink -f "$2"); REPS=${3:-5}; SECS=${4:-4}; C=${5:-16}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$w/key.pem" -out "$w/cert.pem" >/dev/null 2>&1
cat "$w/cert.pem" "$w/key.pem" >"$w/both.pem"
"$NEW" backend --listen 127.0.0.1:0 --ports 27100-27101 --name s --workers 64 >"$w/b.log" 2>&1 & pids+=($!)
for i in $(seq 1 100); do grep -q "backends on\|listening on" "$w/b.log" && break; sleep 0.1; done
conf() { # file port
  printf 'listeners:\n  - name: web\n    address: 127.0.0.1:%s\n    tls: {cert: "%s", key: "%s"}\n' $2 "$w/cert.pem" "$w/key.pem"
  printf 'pools:\n  - name: p\n    balancer: roundrobin\n    backends:\n      - address: 127.0.0.1:27100\n      - address: 127.0.0.1:27101\n'
  printf 'logging:\n  level: warn\n'
}
conf "$w/new.yaml" 27110 >"$w/new.yaml"; conf "$w/old.yaml" 27111 >"$w/old.yaml"
"$NEW" serve -c "$w/new.yaml" >"$w/pn.log" 2>&1 & pn=$!; pids+=($pn)
"$OLD" serve -c "$w/old.yaml" >"$w/po.log" 2>&1 & po=$!; pids+=($po)
printf 'global\n    nbthread 1\n    maxconn 9000\ndefaults\n    mode http\n    option http-keep-alive\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend fe\n    bind 127.0.0.1:27112 ssl crt %s alpn http/1.1\n    default_backend be\nbackend be\n    balance roundrobin\n    http-reuse always\n    server a 127.0.0.1:27100\n    server b 127.0.0.1:27101\n' "$w/both.pem" >"$w/h.cfg"
haproxy -f "$w/h.cfg" -db >"$w/h.log" 2>&1 & ph=$!; pids+=($ph)
for port in 27110 27111 27112; do
  for i in $(seq 1 100); do curl -sk -o /dev/null https://127.0.0.1:$port/ && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
run() { # pid port -> µs/req
  local t0 t1 out reqs
  t0=$(ticks $1)
  if [ -n "${CLOSE:-}" ]; then
    out=$(ab -q -c$C -n $CLOSE https://127.0.0.1:$2/ 2>&1)
    t1=$(ticks $1)
    reqs=$(awk '/^Complete requests/ {c=$3} /^Failed requests/ {f=$3} END {print c-f}' <<<"$out")
  else
    out=$(wrk -t1 -c$C -d${SECS}s https://127.0.0.1:$2/ 2>&1)
    t1=$(ticks $1)
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  fi
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
N=(); O=(); H=()
for r in $(seq 1 $REPS); do N+=($(run $pn 27110)); O+=($(run $po 27111)); H+=($(run $ph 27112)); done
printf 'https%s c=%d: new %s µs/req, old %s, haproxy %s; new/haproxy %s, old/haproxy %s   runs: %s | %s | %s\n' "${CLOSE:+ close}" $C \
  $(median "${N[@]}") $(median "${O[@]}") $(median "${H[@]}") \
  $(awk -v a=$(median "${N[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') \
  $(awk -v a=$(median "${O[@]}") -v b=$(median "${H[@]}") 'BEGIN{printf "%.2f", a/b}') "${N[*]}" "${O[*]}" "${H[*]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
