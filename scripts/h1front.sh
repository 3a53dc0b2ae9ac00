#!/bin/bash
# h1front.sh NEW_BIN OLD_BIN [REPS] [SECS] [CONNS]: CPU per request of the two listener kinds the
# event-loop engine took over last from fasthttp (issue 20), NEW_BIN's and OLD_BIN's `ballast serve` side by side
# (interleaved in every repetition), a 44-byte page from two `ballast backend` ports behind them:
#   h2c    HTTP/1.1 keep-alive requests on an h2c listener (`wrk -t1 -cCONNS -dSECS`);
#   proxy  HTTPS keep-alive behind a PROXY header: wrk -> HAProxy (one thread, mode tcp: each
#          of wrk's connections becomes one TLS connection, `ssl send-proxy-v2`) -> a TLS
#          listener with accept_proxy. (In mode http HAProxy closes a send-proxy server
#          connection after each response once its first clients have gone, whichever plane
#          serves it: a TLS handshake per request.)
# The figure is the proxy's utime+stime (the shared tools' procstat) over the requests wrk
# counted; medians of REPS. MODES (default "h2c proxy") picks the rows. Ports 27300-27301
# (backends), 27310-27315. Run it under `flock /work/notes/bench.lock`. Needs wrk, haproxy,
# openssl, curl, python3.
set -u
NEW=$(readlink -f "$1"); OLD=$(readlink -f "$2"); REPS=${3:-5}; SECS=${4:-4}; C=${5:-16}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
for c in haproxy wrk openssl curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$w/key.pem" -out "$w/cert.pem" >/dev/null 2>&1
"$NEW" backend --listen 127.0.0.1:0 --ports 27300-27301 --name s --workers 64 >"$w/b.log" 2>&1 & pids+=($!)
for i in $(seq 1 100); do grep -q "backends on\|listening on" "$w/b.log" && break; sleep 0.1; done
conf() { # port: an h2c listener on port, a TLS one with accept_proxy on port+2
  printf 'listeners:\n  - {name: h2c, address: "127.0.0.1:%s", h2c: true}\n' $1
  printf '  - {name: tls, address: "127.0.0.1:%s", accept_proxy: true, tls: {cert: "%s", key: "%s"}}\n' $(($1 + 2)) "$w/cert.pem" "$w/key.pem"
  printf 'pools:\n  - name: p\n    balancer: roundrobin\n    backends:\n      - address: 127.0.0.1:27300\n      - address: 127.0.0.1:27301\n'
  printf 'logging:\n  level: warn\n'
}
conf 27310 >"$w/new.yaml"; conf 27311 >"$w/old.yaml"
"$NEW" serve -c "$w/new.yaml" >"$w/pn.log" 2>&1 & pn=$!; pids+=($pn)
"$OLD" serve -c "$w/old.yaml" >"$w/po.log" 2>&1 & po=$!; pids+=($po)
# HAProxy in front of each TLS listener: 27314 -> new's 27312, 27315 -> old's 27313.
printf 'global\n    nbthread 1\n    maxconn 9000\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n' >"$w/h.cfg"
for p in 27312 27313; do
  printf 'frontend f%s\n    bind 127.0.0.1:%s\n    default_backend b%s\nbackend b%s\n    server s 127.0.0.1:%s ssl verify none alpn http/1.1 send-proxy-v2\n' $p $(($p + 2)) $p $p $p >>"$w/h.cfg"
done
haproxy -f "$w/h.cfg" -db >"$w/h.log" 2>&1 & pids+=($!)
for port in 27310 27311 27314 27315; do
  for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
run() { # pid port -> µs/req
  local t0 t1 out reqs
  t0=$(ticks $1)
  out=$(wrk -t1 -c$C -d${SECS}s http://127.0.0.1:$2/ 2>&1)
  t1=$(ticks $1)
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers on port $2" >&2; fi
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for mode in ${MODES:-h2c proxy}; do
  case $mode in
  h2c) np=27310; op=27311 ;;
  proxy) np=27314; op=27315 ;;
  esac
  N=(); O=()
  for r in $(seq 1 $REPS); do N+=($(run $pn $np)); O+=($(run $po $op)); done
  printf '%s c=%d: new %s µs/req, old %s; new/old %s   runs: %s | %s\n' $mode $C \
    $(median "${N[@]}") $(median "${O[@]}") \
    $(awk -v a=$(median "${N[@]}") -v b=$(median "${O[@]}") 'BEGIN{printf "%.2f", a/b}') "${N[*]}" "${O[*]}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
