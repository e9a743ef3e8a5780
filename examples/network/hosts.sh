#!/usr/bin/env bash
# Two web servers on a Docker network of their own, standing in for the internet: one the
# allowlist-fetch task allows (allowed.test), one it does not (blocked.test). Nothing here
# leaves the machine: the network is internal. Run the task against them with
#   examples/network/hosts.sh up
#   harness batch examples/network --agent oracle --task-internet harness-example-internet
#   examples/network/hosts.sh down
set -euo pipefail
network=${HOSTS_NETWORK:-harness-example-internet}
image=${HOSTS_IMAGE:-agent-harness/base:bookworm}
case "${1:-up}" in
  up)
    docker network inspect "$network" >/dev/null 2>&1 || docker network create --internal "$network" >/dev/null
    for host in allowed.test blocked.test; do
      name="$network-${host%%.*}"
      docker rm -f "$name" >/dev/null 2>&1 || true
      # Each answers / with its own name, and /ip with its address on the network.
      docker run -d --name "$name" --network "$network" --network-alias "$host" "$image" \
        bash -c "mkdir -p /srv && cd /srv && echo $host > index.html && hostname -i | cut -d' ' -f1 > ip && exec python3 -m http.server 80" >/dev/null
    done
    # Ready when both answer from inside the network.
    for _ in $(seq 1 50); do
      if docker run --rm --network "$network" "$image" bash -c 'curl -sf http://allowed.test/ && curl -sf http://blocked.test/' >/dev/null 2>&1; then
        echo "up: allowed.test and blocked.test on $network"; exit 0
      fi
      sleep 0.2
    done
    echo "the web servers did not answer" >&2; exit 1
    ;;
  down)
    docker rm -f "$network-allowed" "$network-blocked" >/dev/null 2>&1 || true
    docker network rm "$network" >/dev/null 2>&1 || true
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
