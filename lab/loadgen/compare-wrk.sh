#!/usr/bin/env bash
# compare-wrk.sh: CPU cost per request of `ballast bench` against Debian's wrk, side by side in
# one run, both driving the same `ballast backend --workers 64 --service 0` on loopback with
# keep-alive and 16 connections. Each load generator runs inside a child shell, and its CPU
# (utime + stime) is read from that shell's cutime + cstime in /proc/PID/stat once it has been
# reaped, then divided by the requests it completed. Runs interleave (wrk, bench, wrk, ...)
# and the medians are reported: CPU per request is the steadiest figure on a shared machine.
#
# usage: lab/loadgen/compare-wrk.sh [SECONDS_PER_RUN (5)] [ROUNDS (3)]   (from the module root)
# BALLAST=path uses a built binary instead of building ./cmd/ballast; PORT (18093) and WRK
# (/usr/bin/wrk) may be overridden too.
set -euo pipefail
secs=${1:-5}
rounds=${2:-3}
port=${PORT:-18093}
conc=16
tick=$(getconf CLK_TCK)
wrk=${WRK:-/usr/bin/wrk}
[ -x "$wrk" ] || { echo "compare-wrk: $wrk not found" >&2; exit 1; }

tmp=$(mktemp -d)
bpid=
cleanup() { [ -n "$bpid" ] && kill "$bpid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
if [ -n "${BALLAST:-}" ]; then
	cp "$BALLAST" "$tmp/ballast"
else
	go build -o "$tmp/ballast" ./cmd/ballast
fi
"$tmp/ballast" backend --listen "127.0.0.1:$port" --workers 64 --service 0 >/dev/null &
bpid=$!
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.05
done
url="http://127.0.0.1:$port/"

# cpu_ticks PID: utime + stime of a live process (fields 14, 15).
cpu_ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }

# measure NAME CMD...: runs CMD in a child shell; prints "requests cpu_ticks backend_ticks".
measure() {
	local name=$1; shift
	local b0; b0=$(cpu_ticks "$bpid")
	# the child shell reaps CMD, then reports its own cutime + cstime (fields 16, 17)
	bash -c '"$@" >"'"$tmp/$name.out"'" 2>&1; awk '"'"'{sub(/.*\) /, ""); print $14 + $15}'"'"' /proc/$$/stat' _ "$@" >"$tmp/$name.cpu"
	local b1; b1=$(cpu_ticks "$bpid")
	local reqs
	if [ "$name" = wrk ]; then
		reqs=$(awk '/requests in/ {print $1}' "$tmp/wrk.out")
	else
		reqs=$(sed -n 's/.*"requests":\([0-9]*\).*/\1/p' "$tmp/bench.out")
	fi
	echo "$reqs $(cat "$tmp/$name.cpu") $((b1 - b0))"
}

printf '%-6s %-5s %10s %10s %12s %14s\n' round tool requests req/s cpu-us/req backend-us/req
for r in $(seq "$rounds"); do
	for tool in wrk bench; do
		if [ $tool = wrk ]; then
			set -- $(measure wrk "$wrk" -t2 -c$conc -d"${secs}s" "$url")
		else
			set -- $(measure bench "$tmp/ballast" bench -k -c $conc -d "${secs}s" --json "$url")
		fi
		awk -v r="$r" -v t=$tool -v n="$1" -v c="$2" -v b="$3" -v hz="$tick" -v s="$secs" \
			'BEGIN { printf "%-6s %-5s %10d %10.0f %12.2f %14.2f\n", r, t, n, n/s, c*1e6/hz/n, b*1e6/hz/n }' |
			tee -a "$tmp/rows"
	done
done
awk '
	{ cpu[$2] = cpu[$2] " " $5 }
	function median(s,   a, n, i, j, t) {
		n = split(s, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		w = median(cpu["wrk"]); b = median(cpu["bench"])
		printf "median CPU per request: wrk %.2f us, ballast bench %.2f us, ratio %.2f (goal <= 1.5)\n", w, b, b / w
	}' "$tmp/rows"
