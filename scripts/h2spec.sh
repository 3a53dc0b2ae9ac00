#!/bin/bash
# h2spec.sh BALLAST_BIN: h2spec (every case, 5 s timeout each) against `ballast serve` BIN on a
# TLS listener (ALPN h2, 127.0.0.1:18443) and an h2c listener (127.0.0.1:18080), in front of one
# nginx backend (127.0.0.1:18091) that answers 200 with a body long enough for every case
# (6.9.2 skips below 5 bytes), without reading the request body (so cases that leave the
# request open meet a stream whose response is complete: h2mux's LingerTimeout). Prints each
# summary and any failure.
# Needs: h2spec nginx openssl curl (h2spec: `go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible`).
set -u
BIN=$(readlink -f "$1")
for c in h2spec nginx openssl curl; do command -v $c >/dev/null || { echo "missing $c"; exit 2; }; done
w=$(mktemp -d); chmod 755 "$w"
trap 'kill $bp $np 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$w/key.pem" -out "$w/cert.pem" 2>/dev/null
cat >"$w/nginx.conf" <<N
worker_processes 1; daemon off; pid $w/nginx.pid; error_log $w/nginx.err;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:18091; location / { return 200 "an answer long enough for every h2spec case\n"; } } }
N
nginx -p "$w/" -c "$w/nginx.conf" -e stderr >"$w/nginx.log" 2>&1 & np=$!
cat >"$w/b.yaml" <<Y
listeners:
  - {name: tls, address: "127.0.0.1:18443", tls: {cert: "$w/cert.pem", key: "$w/key.pem"}}
  - {name: plain, address: "127.0.0.1:18080", h2c: true}
routes: [{pool: p}]
pools: [{name: p, backends: [{address: "127.0.0.1:18091"}]}]
admin: {address: "127.0.0.1:18999"}
Y
"$BIN" serve -c "$w/b.yaml" >"$w/ballast.log" 2>&1 & bp=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18999/ && break; sleep 0.1; done
echo "TLS:"; h2spec -t -k -h 127.0.0.1 -p 18443 -o 5 2>&1 | grep -E -A3 "×|tests,"
echo "h2c:"; h2spec -h 127.0.0.1 -p 18080 -o 5 2>&1 | grep -E -A3 "×|tests,"
