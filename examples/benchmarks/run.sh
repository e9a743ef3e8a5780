#!/usr/bin/env bash
# Runs the example benchmark dataset with one command after the quick start: it makes what a
# benchmark run needs and is missing (the statically linked sandbox-server that goes into each
# task's image, the base image the examples build on), then runs the batch.
#
#   examples/benchmarks/run.sh                      (the oracle: every healthy task passes)
#   examples/benchmarks/run.sh --agent nop          (nothing done: every task fails)
#   examples/benchmarks/run.sh --model openai/gpt-5-mini
#
# Extra arguments go to `harness batch`. Needs a Docker engine; the base image is built with
# debootstrap from this machine's Debian mirror when it can be, otherwise from debian:bookworm.
set -euo pipefail
cd "$(dirname "$0")/../.."

static=target/x86_64-unknown-linux-gnu/server/sandbox-server
if [ ! -x "$static" ]; then
  echo "building the static sandbox-server for task containers (once; a few minutes)"
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile server -p sandbox-server --target x86_64-unknown-linux-gnu
fi
[ -x target/release/harness ] || cargo build --release -p controller

base=agent-harness/base:bookworm
if ! docker image inspect "$base" >/dev/null 2>&1; then
  echo "building $base (once)"
  if command -v debootstrap >/dev/null && [ "$(id -u)" = 0 ]; then
    docker/build-base-image.sh "$base"
  else
    printf 'FROM debian:bookworm\nRUN apt-get update && apt-get install -y --no-install-recommends git python3 ca-certificates curl procps && rm -rf /var/lib/apt/lists/*\n' \
      | docker build -q -t "$base" -
  fi
fi

# The oracle unless the arguments name an agent or a model; the host's CA bundle for builds
# behind a TLS-inspecting proxy, when it has one.
args=()
case " $* " in *" --agent "*|*" --agent="*|*" --model "*|*" --model="*) ;; *) args+=(--agent oracle) ;; esac
[ -f /etc/ssl/certs/ca-certificates.crt ] && args+=(--build-ca /etc/ssl/certs/ca-certificates.crt)
# Expect exit 11: one task is Windows-only (not runnable here) and one is broken on purpose;
# the report labels both.
exec target/release/harness batch examples/benchmarks --image-map-file examples/benchmarks/image-map.txt \
  "${args[@]}" "$@"
