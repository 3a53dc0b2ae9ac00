#!/bin/bash
# h1peers.sh BALLAST_BIN [REPS] [SECS] [N]: CPU-microseconds per request of two Ballast builds,
# BALLAST_BIN ("bin") and BALLAST_BIN2 ("bin2": another build, say main's; BALLAST_BIN when
# unset), against HAProxy (one thread), all three interleaved in one run (HAProxy, bin2, bin,
# HAProxy, ...), round
# robin over two nginx backends serving 44 bytes: the shared peers.sh's method and loads
# (../shared/tools/peers/peers.sh), wrk -t1 keep-alive at c=16 and c=256 for SECS seconds and
# ab -c16 -n N without keep-alive, plus idle.py's memory per idle connection (IDLE=N
# connections; 0 skips it). Prints one row per load (medians of REPS runs, every run in
# brackets) and each plane's ratio to HAProxy. ENGINE2_ENV (say BALLAST_H1_SHARDS=1) adds a
# second engine process with those environment variables as a fourth column, for comparing
# engine settings in the same run; ROWS (default "ka16 ka256 close"; lat256 adds wrk's p50/p99
# latency at c=256 for each process) picks the loads. Needs: haproxy nginx wrk ab curl python3.
set -u
BIN=$(readlink -f "$1"); FBIN=$(readlink -f "${BALLAST_BIN2:-$1}"); REPS=${2:-5}; SECS=${3:-4}; N=${4:-20000}; IDLE=${IDLE:-5000}
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
for c in haproxy nginx wrk ab curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); bp=; hp=; fp=; ep=; e2p=
chmod 755 "$w"
trap 'kill $bp $hp $fp $ep $e2p 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/html" "$w/tmp"; printf '<html><body><h1>It works!</h1></body></html>' | head -c 44 >"$w/html/index.html"
sed -e 's/18081/28381/; s/18082/28382/' "$shared/nginx-backends.conf" >"$w/nginx.conf"
nginx -p "$w/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & bp=$!
sed -e 's/18080/28390/; s/18081/28381/; s/18082/28382/' "$shared/haproxy.cfg" >"$w/haproxy.cfg"
NBTHREAD=1 haproxy -f "$w/haproxy.cfg" -db >"$w/haproxy.log" 2>&1 & hp=$!
"$FBIN" serve --listen 127.0.0.1:28391 --balancer roundrobin --backend 127.0.0.1:28381 --backend 127.0.0.1:28382 >"$w/bin2.log" 2>&1 & fp=$!
"$BIN" serve --listen 127.0.0.1:28392 --balancer roundrobin --backend 127.0.0.1:28381 --backend 127.0.0.1:28382 >"$w/bin.log" 2>&1 & ep=$!
ports="28381 28382 28390 28391 28392"
if [ -n "${ENGINE2_ENV:-}" ]; then
  env $ENGINE2_ENV "$BIN" serve --listen 127.0.0.1:28393 --balancer roundrobin --backend 127.0.0.1:28381 --backend 127.0.0.1:28382 >"$w/engine2.log" 2>&1 & e2p=$!
  ports="$ports 28393"
fi
for port in $ports; do
  for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
ticks() { python3 "$shared/procstat.py" $1 | cut -d' ' -f1; }
ka() { # pid port conns -> µs/req
  local t0 t1 reqs
  t0=$(ticks $1)
  reqs=$(wrk -t1 -c$3 -d${SECS}s http://127.0.0.1:$2/ 2>/dev/null | awk '/requests in/ {print $1}')
  t1=$(ticks $1)
  awk -v a=$t0 -v b=$t1 -v r=${reqs:-0} -v hz=$hz 'BEGIN{ if (r>0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
cl() { # pid port -> µs/req without keep-alive (nan if any request failed)
  local t0 t1 out ok failed
  t0=$(ticks $1)
  out=$(ab -q -c 16 -n "$N" http://127.0.0.1:$2/ 2>/dev/null)
  t1=$(ticks $1)
  ok=$(awk '/^Complete requests:/ {print $3}' <<<"$out"); failed=$(awk '/^Failed requests:/ {print $3}' <<<"$out")
  awk -v a=$t0 -v b=$t1 -v r=${ok:-0} -v f=${failed:-1} -v hz=$hz 'BEGIN{ if (r>0 && f==0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
ratio() { awk -v b=$1 -v h=$2 'BEGIN{ if (h>0 && b==b) printf "%.2f", b/h; else print "nan" }'; }
printf '%-16s %10s %10s %10s %8s %8s   %s\n' load "haproxy" "bin2" "bin" "2/h" "b/h" "runs (haproxy | bin2 | bin${e2p:+ | engine2})"
row() { # name cmd args...
  local name=$1; shift
  local H=() F=() E=() E2=()
  for r in $(seq 1 $REPS); do
    H+=($("$@" $hp 28390)); F+=($("$@" $fp 28391)); E+=($("$@" $ep 28392))
    [ -n "$e2p" ] && E2+=($("$@" $e2p 28393))
  done
  local mh mf me extra=
  mh=$(median "${H[@]}"); mf=$(median "${F[@]}"); me=$(median "${E[@]}")
  [ -n "$e2p" ] && extra=" | ${E2[*]} (engine2 median $(median "${E2[@]}"), e2/h $(ratio $(median "${E2[@]}") $mh))"
  printf '%-16s %10s %10s %10s %8s %8s   %s | %s | %s%s\n' "$name" $mh $mf $me $(ratio $mf $mh) $(ratio $me $mh) "${H[*]}" "${F[*]}" "${E[*]}" "$extra"
}
kac() { ka $2 $3 $1; }
lat() { # pid port -> "p50/p99" in ms under wrk -c256 (the latency row)
  wrk -t1 -c256 -d${SECS}s --latency http://127.0.0.1:$2/ 2>/dev/null |
    awk '/^ +50%/ {p50=$2} /^ +99%/ {p99=$2} END {printf "%s/%s", p50, p99}'
}
latrow() {
  local H=() F=() E=()
  for r in $(seq 1 $REPS); do H+=($(lat $hp 28390)); F+=($(lat $fp 28391)); E+=($(lat $ep 28392)); done
  printf '%-16s p50/p99 per run: haproxy %s | bin2 %s | bin %s\n' "latency c=256" "${H[*]}" "${F[*]}" "${E[*]}"
}
ROWS=${ROWS:-ka16 ka256 close}
for r in $ROWS; do
  case $r in
  ka16) row "keep-alive c=16" kac 16 ;;
  ka256) row "keep-alive c=256" kac 256 ;;
  close) row "close c=16" cl ;;
  lat256) latrow ;;
  esac
done
if [ "$IDLE" -gt 0 ]; then
  read h h0 h1 < <(python3 "$shared/idle.py" 28390 "$IDLE" $hp)
  read f f0 f1 < <(python3 "$shared/idle.py" 28391 "$IDLE" $fp)
  read e e0 e1 < <(python3 "$shared/idle.py" 28392 "$IDLE" $ep)
  printf 'idle kB/conn (%s held): haproxy %s (RSS %s -> %s kB), bin2 %s (%s -> %s), bin %s (%s -> %s); 2/h %s, b/h %s\n' \
    "$IDLE" $h $h0 $h1 $f $f0 $f1 $e $e0 $e1 $(ratio $f $h) $(ratio $e $h)
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
