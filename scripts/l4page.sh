#!/bin/bash
# l4page.sh OLD_BIN NEW_BIN [REPS] [N]: CPU-microseconds per request of two Ballast binaries'
# L4 TCP proxies (`serve --mode tcp`) for 20 kB responses: one nginx serving a 20 kB page, each
# Ballast in front of it, `ballast bench -c 50 -n N` (a new connection per request) through
# each in turn, REPS times interleaved; CPU is utime+stime of each proxy from /proc.
# Ports 29501 (nginx), 29511 (OLD), 29512 (NEW). Needs: nginx.
set -u
OLD=$(readlink -f "$1"); NEW=$(readlink -f "$2"); REPS=${3:-3}; N=${4:-20000}
command -v nginx >/dev/null || { echo "missing nginx"; exit 2; }
w=$(mktemp -d); np=; op=; nw=
chmod 755 "$w" # nginx workers must read it
trap 'kill $np $op $nw 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
mkdir -p "$w/html"; head -c 20480 /dev/zero | tr '\0' x >"$w/html/index.html"
cat >"$w/nginx.conf" <<CFG
worker_processes 1; daemon off; pid $w/nginx.pid; error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $w/t1; proxy_temp_path $w/t2; fastcgi_temp_path $w/t3; uwsgi_temp_path $w/t4; scgi_temp_path $w/t5;
  server { listen 127.0.0.1:29501 backlog=4096; root $w/html; }
}
CFG
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
nginx -c "$w/nginx.conf" -p "$w/" & np=$!
"$OLD" serve --mode tcp --listen 127.0.0.1:29511 --backend 127.0.0.1:29501 >"$w/old.log" 2>&1 & op=$!
"$NEW" serve --mode tcp --listen 127.0.0.1:29512 --backend 127.0.0.1:29501 >"$w/new.log" 2>&1 & nw=$!
for port in 29501 29511 29512; do
  for i in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for r in $(seq 1 "$REPS"); do
  for which in old new; do
    if [ $which = old ]; then pid=$op port=29511; else pid=$nw port=29512; fi
    a=$(cpu $pid)
    out=$("$NEW" bench -c 50 -n "$N" "http://127.0.0.1:$port/" 2>&1)
    b=$(cpu $pid)
    failed=$(awk '/^Failed requests:/ {print $3}' <<<"$out")
    echo "$which run $r: $(awk -v a=$a -v b=$b -v n=$N -v hz=$hz 'BEGIN{printf "%.1f", (b-a)*1e6/hz/n}') CPU-µs/req (failed: ${failed:-?})"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
