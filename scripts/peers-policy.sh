#!/bin/bash
# peers-policy.sh: stands in for the ballast binary in scripts/peers.sh so that the peers figure
# is measured on a route with request and response headers, a rewrite and a rate limit:
#   BALLAST=$PWD/ballast scripts/peers.sh scripts/peers-policy.sh
# It turns "serve --listen A --balancer B --backend X --backend Y" into such a config file.
listen=; bal=roundrobin; backends=()
shift # serve
while [ $# -gt 0 ]; do
  case $1 in
  --listen) listen=$2; shift 2 ;;
  --balancer) bal=$2; shift 2 ;;
  --backend) backends+=("$2"); shift 2 ;;
  *) shift ;;
  esac
done
cfg=$(mktemp --suffix=.yaml)
{
  echo "listeners:"; echo "  - address: $listen"
  echo "routes:"
  echo "  - pool: web"
  echo "    rewrite: {prefix: /, replacement: /}"
  echo "    rate_limit: {rate: 1000000, burst: 1000000}"
  echo "    request_headers:"
  echo "      set: [\"X-Real-IP: \${client_ip}\", \"X-Edge: 1\"]"
  echo "    response_headers:"
  echo "      set: [\"X-Served-By: \${backend}\"]"
  echo "pools:"; echo "  - name: web"; echo "    balancer: $bal"; echo "    backends:"
  for b in "${backends[@]}"; do echo "      - address: $b"; done
} >"$cfg"
exec "${BALLAST:?set BALLAST to the ballast binary}" serve -c "$cfg"
