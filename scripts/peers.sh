#!/bin/bash
# peers.sh BALLAST_BIN [REPS] [SECS] [N]: CPU-microseconds per request of Ballast vs HAProxy
# (one thread), round robin over two nginx backends serving 44 bytes, in two client modes:
#   keep-alive   wrk -c16 and -c256 for SECS seconds (the shared bar script,
#                ../shared/tools/peers/peers.sh next to the repository, runs this part unchanged);
#   close        ab -c16 -n N, a new client connection per request (no -k), which adds
#                accept and close to every request.
# Runs are interleaved (HAProxy, Ballast, HAProxy, ...); CPU is utime+stime from /proc of the
# proxy process. Prints one table row per load, medians of REPS runs, and the worst ratio.
# Needs: haproxy nginx wrk ab (apt-get install -y haproxy nginx wrk apache2-utils).
set -u
BIN=$(readlink -f "$1"); REPS=${2:-5}; SECS=${3:-4}; N=${4:-20000}
# The shared peers tools sit next to the repository (PEERS_SHARED overrides).
shared=${PEERS_SHARED:-$(cd "$(dirname "$0")/.." && pwd)/../shared/tools/peers}
for c in haproxy nginx wrk ab curl python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
ka=$("$shared/peers.sh" "$BIN" "$REPS" "$SECS")

w=$(mktemp -d); bp=; hp=; lp=
# mktemp -d makes the directory 0700: nginx started as root serves from it with workers that
# could not read it, answering 403 to everything.
chmod 755 "$w"
trap 'kill $bp $hp $lp 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/html" "$w/tmp"; printf '<html><body><h1>It works!</h1></body></html>' | head -c 44 >"$w/html/index.html"
sed -e 's/18081/28181/; s/18082/28182/' "$shared/nginx-backends.conf" >"$w/nginx.conf"
nginx -p "$w/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & bp=$!
sed -e 's/18080/28190/; s/18081/28181/; s/18082/28182/' "$shared/haproxy.cfg" >"$w/haproxy.cfg"
NBTHREAD=1 haproxy -f "$w/haproxy.cfg" -db >"$w/haproxy.log" 2>&1 & hp=$!
"$BIN" serve --listen 127.0.0.1:28191 --balancer roundrobin --backend 127.0.0.1:28181 --backend 127.0.0.1:28182 >"$w/ballast.log" 2>&1 & lp=$!
for port in 28181 28182 28190 28191; do
  for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
measure() { # pid port -> µs/req (nan if any request failed)
  local t0 t1 out ok failed
  t0=$(python3 "$shared/procstat.py" $1 | cut -d' ' -f1)
  out=$(ab -q -c 16 -n "$N" http://127.0.0.1:$2/ 2>/dev/null)
  t1=$(python3 "$shared/procstat.py" $1 | cut -d' ' -f1)
  ok=$(awk '/^Complete requests:/ {print $3}' <<<"$out"); failed=$(awk '/^Failed requests:/ {print $3}' <<<"$out")
  awk -v a=$t0 -v b=$t1 -v r=${ok:-0} -v f=${failed:-1} -v hz=$hz 'BEGIN{ if (r>0 && f==0) printf "%.2f", (b-a)*1e6/hz/r; else print "nan" }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
B=(); H=()
for r in $(seq 1 $REPS); do H+=($(measure $hp 28190)); B+=($(measure $lp 28191)); done
mb=$(median "${B[@]}"); mh=$(median "${H[@]}")
cr=$(awk -v b=$mb -v h=$mh 'BEGIN{ if (h>0 && b==b) printf "%.2f", b/h; else print "nan" }')

printf '%-22s %12s %12s %6s   %s\n' mode "ballast µs" "haproxy µs" ratio "runs (ballast | haproxy)"
while read -r line; do
  case $line in
  c=*) set -- $line
    printf '%-22s %12s %12s %6s   %s\n' "keep-alive wrk $1" "$3" "$6" "$9" "$(sed 's/.*(runs: \(.*\))/\1/' <<<"$line")" ;;
  esac
done <<<"$ka"
printf '%-22s %12s %12s %6s   %s\n' "close ab -c16 -n$N" "$mb" "$mh" "$cr" "${B[*]} | ${H[*]}"
worst=$(printf '%s\n' "$ka" | awk '/^worst ratio/ {print $3}')
case "${worst:-nan} $cr" in
*nan*) worst=nan ;;
*) worst=$(awk -v w="$worst" -v r="$cr" 'BEGIN{ print (r+0 > w+0 ? r : w) }') ;;
esac
echo "worst ratio $worst; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
