#!/bin/bash
# h1many.sh BALLAST_BIN [REPS] [SECS] [N]: Ballast's own CPU per request with N backends
# (default 2000) against 2, for two builds (BALLAST_BIN2: another build, say main's, BALLAST_BIN
# when unset; and BALLAST_BIN), all four proxies interleaved in every repetition, as docs/performance.md
# ("Many backends") measures it: two `ballast backend --ports` fleets (2 and N ports), one
# `ballast serve` per fleet and plane (vnswrr), the backend connections opened by a warm-up of
# 4N+1000 requests, then `ballast bench -k -c 64 -d SECS -R FILE` (4096 distinct paths, as the
# lab) against each proxy in turn; utime+stime of each proxy over the requests bench counted.
# Prints each plane's medians at 2 and N backends and their ratio. Ports 27000-27001 and
# 29000-(29000+N-1) (N <= 3700: below the ephemeral range) for the fleets, 27950-27953 for the
# proxies, 27960-27961 for HAProxy: with HAPROXY=1 HAProxy (one thread, roundrobin, http-reuse
# always) runs beside them over the same fleets, for the part of the growth any proxy pays.
# Needs python3 (and haproxy).
set -u
BIN=$(readlink -f "$1"); FBIN=$(readlink -f "${BALLAST_BIN2:-$1}"); REPS=${2:-3}; SECS=${3:-8}; N=${4:-2000}
[ "$N" -le 3700 ] || { echo "N must be at most 3700"; exit 2; }
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] && echo "kept $w" || rm -rf "$w"' EXIT
# The lab's fleets: as many workers per backend as it gives them (instant service).
"$BIN" backend --listen 127.0.0.1:0 --ports 27000-27001 --name s --workers 64 >"$w/f2.log" 2>&1 & pids+=($!)
hi=$((29000 + N - 1)); per=2500
for ((lo = 29000; lo <= hi; lo += per)); do
  top=$((lo + per - 1)); [ $top -gt $hi ] && top=$hi
  "$BIN" backend --listen 127.0.0.1:0 --ports $lo-$top --name m --workers $((N > 2048 ? 4 : 32)) >"$w/fn$lo.log" 2>&1 & pids+=($!)
done
sleep 0.5
for f in "$w"/f2.log "$w"/fn*.log; do # until every fleet process listens
  for i in $(seq 1 600); do grep -q "backends on\|listening on" "$f" && break; sleep 0.1; done
done
conf() { # file ports-from ports-to listen-port
  { echo "listeners:"; echo "  - name: lab"; echo "    address: 127.0.0.1:$4"
    echo "pools:"; echo "  - name: lab"; echo "    balancer: vnswrr"; echo "    backends:"
    for ((p = $2; p <= $3; p++)); do echo "      - address: 127.0.0.1:$p"; done
    echo "logging:"; echo "  level: warn"; } >"$1"
}
conf "$w/f2.yaml" 27000 27001 27950; conf "$w/fn.yaml" 29000 $hi 27951
conf "$w/e2.yaml" 27000 27001 27952; conf "$w/en.yaml" 29000 $hi 27953
"$FBIN" serve -c "$w/f2.yaml" >"$w/pf2.log" 2>&1 & pf2=$!; pids+=($pf2)
"$FBIN" serve -c "$w/fn.yaml" >"$w/pfn.log" 2>&1 & pfn=$!; pids+=($pfn)
"$BIN" serve -c "$w/e2.yaml" >"$w/pe2.log" 2>&1 & pe2=$!; pids+=($pe2)
"$BIN" serve -c "$w/en.yaml" >"$w/pen.log" 2>&1 & pen=$!; pids+=($pen)
ports="27950 27951 27952 27953"
if [ -n "${HAPROXY:-}" ]; then
  hconf() { # file ports-from ports-to listen-port
    { printf 'global\n    nbthread 1\n    maxconn 9000\ndefaults\n    mode http\n    option http-keep-alive\n'
      printf '    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n    maxconn 9000\n'
      printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\nbackend be\n    balance roundrobin\n    http-reuse always\n' $4
      for ((p = $2; p <= $3; p++)); do echo "    server s$p 127.0.0.1:$p"; done; } >"$1"
  }
  hconf "$w/h2.cfg" 27000 27001 27960; hconf "$w/hn.cfg" 29000 $hi 27961
  haproxy -f "$w/h2.cfg" -db >"$w/h2.log" 2>&1 & ph2=$!; pids+=($ph2)
  haproxy -f "$w/hn.cfg" -db >"$w/hn.log" 2>&1 & phn=$!; pids+=($phn)
  ports="$ports 27960 27961"
fi
for port in $ports; do
  for i in $(seq 1 300); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
done
for i in $(seq 0 4095); do echo "/k/$i"; done >"$w/paths"
for port in 27950 27952; do "$BIN" bench -k -c 64 -n 1008 -R "$w/paths" http://127.0.0.1:$port/ >/dev/null 2>&1; done
for port in 27951 27953 ${HAPROXY:+27961}; do "$BIN" bench -k -c 64 -n $((4 * N + 1000)) -R "$w/paths" http://127.0.0.1:$port/ >/dev/null 2>&1; done
[ -n "${HAPROXY:-}" ] && "$BIN" bench -k -c 64 -n 1008 -R "$w/paths" http://127.0.0.1:27960/ >/dev/null 2>&1
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
run() { # pid port -> µs/req
  local t0 t1 out reqs
  t0=$(ticks $1)
  out=$("$BIN" bench -k -c 64 -d ${SECS}s -R "$w/paths" --json http://127.0.0.1:$2/ 2>/dev/null)
  t1=$(ticks $1)
  echo "$out" >>"$w/bench-$2.json"
  reqs=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["requests"] - d["failed"])' <<<"$out" 2>/dev/null)
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
F2=(); FN=(); E2=(); EN=(); H2=(); HN=()
for r in $(seq 1 $REPS); do
  F2+=($(run $pf2 27950)); FN+=($(run $pfn 27951)); E2+=($(run $pe2 27952)); EN+=($(run $pen 27953))
  if [ -n "${HAPROXY:-}" ]; then H2+=($(run $ph2 27960)); HN+=($(run $phn 27961)); fi
done
pct() { awk -v n=$1 -v b=$2 'BEGIN{ if (b>0 && n==n) printf "%+.1f %%", (n/b-1)*100; else print "nan" }'; }
printf 'bin2:     n=2 %s µs/req, n=%d %s µs/req (%s)   runs: %s | %s\n' $(median "${F2[@]}") $N $(median "${FN[@]}") "$(pct $(median "${FN[@]}") $(median "${F2[@]}"))" "${F2[*]}" "${FN[*]}"
printf 'bin:      n=2 %s µs/req, n=%d %s µs/req (%s)   runs: %s | %s\n' $(median "${E2[@]}") $N $(median "${EN[@]}") "$(pct $(median "${EN[@]}") $(median "${E2[@]}"))" "${E2[*]}" "${EN[*]}"
[ -n "${HAPROXY:-}" ] && printf 'haproxy:  n=2 %s µs/req, n=%d %s µs/req (%s)   runs: %s | %s\n' $(median "${H2[@]}") $N $(median "${HN[@]}") "$(pct $(median "${HN[@]}") $(median "${H2[@]}"))" "${H2[*]}" "${HN[*]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
