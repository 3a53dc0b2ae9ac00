#!/bin/bash
# l4peers.sh BALLAST_BIN [REPS] [SECS] [N] [IDLE]: Ballast's TCP proxy (`serve -c` with tcp listeners) vs
# HAProxy `mode tcp` (one thread) vs nginx `stream` (one worker), round robin, the three
# interleaved, each figure the proxy's own CPU time or memory from /proc (its process tree):
#   bulk   iperf3 -t SECS through each proxy to one iperf3 server: CPU-seconds per GB moved;
#   rate   N short connections, 16 at a time (connect, 100 bytes each way, close) to two echo
#          backends: CPU-microseconds per connection;
#   idle   IDLE connections held open through each proxy: RSS growth per connection (kB).
# Prints medians of REPS runs and ratios to HAProxy. Needs: haproxy nginx libnginx-mod-stream
# iperf3 python3 (apt-get install -y haproxy nginx libnginx-mod-stream iperf3).
# Environment: ROWS (default "bulk rate idle") picks rows; L4PEERS_BASE (default 29000) moves
# every port (BASE+1.. backends, +10x HAProxy, +20x nginx, +30x Ballast) for a second run;
# BALLAST_OLD=another binary runs it too (+40x), interleaved, for a before/after in one run.
set -u
ROWS=${ROWS:-bulk rate idle}; P=${L4PEERS_BASE:-29000}
BIN=$(readlink -f "$1"); REPS=${2:-5}; SECS=${3:-4}; N=${4:-5000}; IDLE=${5:-5000}
here=$(dirname "$(readlink -f "$0")")
# shared/ sits next to the main checkout; a worktree finds that through git's common directory.
main=$(dirname "$(git -C "$here" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || echo "$here/../.git")")
procstat=${PEERS_SHARED:-$main/../shared/tools/peers}/procstat.py
for c in haproxy nginx iperf3 python3; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || { echo "missing nginx stream module (libnginx-mod-stream)"; exit 2; }
[ -f "$procstat" ] || { echo "missing $procstat (set PEERS_SHARED to shared/tools/peers)"; exit 2; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
w=$(mktemp -d); chmod 755 "$w"; pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
hz=$(getconf CLK_TCK)
ticks() { python3 "$procstat" $1 | cut -d' ' -f1; }
rss() { python3 "$procstat" $1 | cut -d' ' -f3; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
ratio() { awk -v b=$1 -v h=$2 'BEGIN{ if (h>0 && b==b) printf "%.2f", b/h; else print "nan" }'; }

# Backends: one iperf3 server for bulk (its control and data connections must meet the same
# server), two echo servers for rate and idle.
iperf3 -s -p $((P+1)) >/dev/null 2>&1 & pids+=($!)
python3 "$here/l4load.py" echo $((P+2)) & pids+=($!)
python3 "$here/l4load.py" echo $((P+3)) & pids+=($!)

# Proxies: HAProxy on P+10x, nginx on P+20x, Ballast on P+30x (and P+40x); x=1 bulk, x=2 echo.
cat >"$w/haproxy.cfg" <<CFG
global
    nbthread 1
    maxconn 9000
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    maxconn 9000
listen bulk
    bind 127.0.0.1:$((P+101))
    server s1 127.0.0.1:$((P+1))
listen echo
    bind 127.0.0.1:$((P+102)) backlog 4096
    balance roundrobin
    server s1 127.0.0.1:$((P+2))
    server s2 127.0.0.1:$((P+3))
CFG
haproxy -f "$w/haproxy.cfg" -db >"$w/haproxy.log" 2>&1 & hp=$!; pids+=($hp)
mkdir -p "$w/nginx/logs"
cat >"$w/nginx.conf" <<CFG
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $w/nginx.pid;
error_log $w/nginx/logs/error.log;
daemon off;
events { worker_connections 20000; }
stream {
    upstream bulk { server 127.0.0.1:$((P+1)); }
    upstream echo { server 127.0.0.1:$((P+2)); server 127.0.0.1:$((P+3)); }
    server { listen 127.0.0.1:$((P+201)); proxy_pass bulk; }
    server { listen 127.0.0.1:$((P+202)) backlog=4096; proxy_pass echo; }
}
CFG
nginx -p "$w/nginx/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & np=$!; pids+=($np)
cat >"$w/ballast.yaml" <<CFG
listeners:
  - {name: bulk, address: 127.0.0.1:$((P+301)), protocol: tcp}
  - {name: echo, address: 127.0.0.1:$((P+302)), protocol: tcp}
pools:
  - name: bulk
    balancer: roundrobin
    backends: [{address: 127.0.0.1:$((P+1))}]
  - name: echo
    balancer: roundrobin
    backends: [{address: 127.0.0.1:$((P+2))}, {address: 127.0.0.1:$((P+3))}]
routes:
  - {listener: bulk, pool: bulk}
  - {listener: echo, pool: echo}
CFG
"$BIN" serve -c "$w/ballast.yaml" >"$w/ballast.log" 2>&1 & bp=$!; pids+=($bp)
OLD=${BALLAST_OLD:-}; op=
if [ -n "$OLD" ]; then
  sed "s/:$((P+301))/:$((P+401))/; s/:$((P+302))/:$((P+402))/" "$w/ballast.yaml" >"$w/old.yaml"
  "$OLD" serve -c "$w/old.yaml" >"$w/old.log" 2>&1 & op=$!; pids+=($op)
fi
sleep 1
# HAProxy needs two descriptors per connection under its maxconn (9000 fits the usual hard
# limit of 20000 and the IDLE connections); a proxy that did not start is reported, not measured.
for x in "haproxy $hp" "nginx $np" "ballast $bp" ${op:+"old $op"}; do
  set -- $x
  kill -0 $2 2>/dev/null || { echo "$1 did not start:"; cat "$w/$1.log"; exit 1; }
done
# Ready: the echo listeners answer a round trip; the bulk listeners accept (iperf3 behind them
# does not echo, and a stray connection would only confuse it).
for port in $((P+102)) $((P+202)) $((P+302)) ${op:+$((P+402))}; do
  for i in $(seq 1 100); do python3 "$here/l4load.py" rate $port 1 1 2>/dev/null | grep -q '^1 0' && break; sleep 0.1; done
done
for port in $((P+101)) $((P+201)) $((P+301)) ${op:+$((P+401))}; do
  for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done

bulk() { # pid port -> CPU-seconds per GB
  local t0 t1 bytes
  t0=$(ticks $1)
  bytes=$(iperf3 -c 127.0.0.1 -p $2 -t $SECS -J 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bytes"])' 2>/dev/null)
  t1=$(ticks $1)
  awk -v a=$t0 -v b=$t1 -v n=${bytes:-0} -v hz=$hz 'BEGIN{ if (n>0) printf "%.3f", (b-a)/hz/(n/1e9); else print "nan" }'
}
rate() { # pid port -> CPU-µs per connection (nan if any failed)
  local t0 t1 out
  t0=$(ticks $1); out=$(python3 "$here/l4load.py" rate $2 $N 16); t1=$(ticks $1)
  awk -v a=$t0 -v b=$t1 -v ok=${out% *} -v f=${out#* } -v hz=$hz 'BEGIN{ if (ok>0 && f==0) printf "%.2f", (b-a)*1e6/hz/ok; else print "nan" }'
}
idle() { # pid port -> kB of RSS per held connection
  local r0 r1 fifo=$w/idle.$2 out
  r0=$(rss $1); mkfifo $fifo
  python3 "$here/l4load.py" idle $2 $IDLE <$fifo >$w/idle.out & local cp=$!
  exec 7>$fifo
  for i in $(seq 1 600); do grep -q held $w/idle.out 2>/dev/null && break; sleep 0.1; done
  sleep 1; r1=$(rss $1)
  exec 7>&-; wait $cp 2>/dev/null; rm -f $fifo
  grep -q "held $IDLE" $w/idle.out && awk -v a=$r0 -v b=$r1 -v n=$IDLE 'BEGIN{ printf "%.2f", (b-a)/n }' || echo nan
  sleep 1
}
row() { # name unit fn port-suffix
  local H=() G=() B=() O=()
  for r in $(seq 1 $REPS); do
    H+=($($3 $hp $((P+100+$4)))); G+=($($3 $np $((P+200+$4)))); B+=($($3 $bp $((P+300+$4))))
    [ -z "$op" ] || O+=($($3 $op $((P+400+$4))))
  done
  local mh mg mb; mh=$(median "${H[@]}"); mg=$(median "${G[@]}"); mb=$(median "${B[@]}")
  local old=
  [ -z "$op" ] || { local mo; mo=$(median "${O[@]}"); old=" old $mo ratio $(ratio $mo $mh) (runs: ${O[*]})"; }
  echo "$1 ($2): ballast $mb haproxy $mh nginx $mg ratio $(ratio $mb $mh) (runs: ${B[*]} | ${H[*]} | ${G[*]})$old"
}
case " $ROWS " in *" bulk "*) row bulk "CPU-s/GB" bulk 1;; esac
case " $ROWS " in *" rate "*) row rate "CPU-us/conn" rate 2;; esac
case " $ROWS " in *" idle "*) REPS=1 row idle "kB/conn" idle 2;; esac
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
