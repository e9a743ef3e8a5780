#!/usr/bin/env bash
# Runs the example benchmark dataset with one command after the quick start: it makes what a
# benchmark run needs and is missing (the statically linked sandbox-server that goes into each
# task's image, the base image the examples build on), then runs the batch.
#
#   examples/benchmarks/run.sh                      (the oracle: every healthy task passes)
#   examples/benchmarks/run.sh --agent nop          (nothing done: every task fails)
#   examples/benchmarks/run.sh --model openai/gpt-5-mini
#
# It ends with `the outcome matched what was expected` and exits 0 when every task passed,
# failed or was left out as its task.toml says (the report's verdict), else it names what was
# not as expected and exits with harness's code. Extra arguments go to `harness batch`. Needs a
# Docker engine; the base image is built with debootstrap from this machine's Debian mirror when
# it can be, otherwise from debian:bookworm.
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
# The batch folder: the one the arguments name, else a new one beside the other runs.
out='' log_dir=${CONTROLLER_LOG_DIR:-runs} prev=''
for arg in "$@"; do
  case "$prev" in --out) out=$arg ;; --log-dir) log_dir=$arg ;; esac
  case "$arg" in --out=*) out=${arg#--out=} ;; --log-dir=*) log_dir=${arg#--log-dir=} ;; esac
  prev=$arg
done
if [ -z "$out" ]; then
  out="$log_dir/examples-$(date -u +%Y%m%d-%H%M%S)-$$"
  args+=(--out "$out")
fi

# Two tasks are there to fail: windows-only cannot run here and off-by-one's oracle is broken
# on purpose, as their task.toml says (`[metadata] expected_not_runnable`, `expected_broken`).
# So harness exits 11 (a task not runnable); whether the run went as expected is the report's
# verdict (`benchmark.unexpected` in report.json), which decides how this script exits: 0 when
# everything went as expected, else harness's code.
code=0
target/release/harness batch examples/benchmarks --image-map-file examples/benchmarks/image-map.txt \
  "${args[@]}" "$@" || code=$?
report="$out/report.json"
# 0, 9 (some failed), 11 (some not runnable), 130 (Ctrl-C): the batch ran and wrote its report;
# any other code is a batch that did not run (bad input), said above.
case $code in 0|9|11|130) ;; *) exit "$code" ;; esac
if [ ! -f "$report" ]; then
  echo "harness exited $code and wrote no $report" >&2
  exit $(( code == 0 ? 1 : code ))
fi
if command -v jq >/dev/null; then
  unexpected=$(jq -r '(.benchmark.unexpected // ["the report has no benchmark section"])[]' "$report")
elif command -v python3 >/dev/null; then
  unexpected=$(python3 -c 'import json, sys
bench = json.load(open(sys.argv[1])).get("benchmark") or {"unexpected": ["the report has no benchmark section"]}
print("\n".join(bench["unexpected"]))' "$report")
else
  echo "harness exited $code; reading the verdict in $report needs jq or python3" >&2
  exit $(( code == 0 ? 1 : code ))
fi
if [ -z "$unexpected" ]; then
  echo "harness exited $code; every task passed, failed or was left out as its task.toml says"
  echo "the outcome matched what was expected"
  exit 0
fi
echo "NOT as expected (harness exited $code; the report: $out/report.html):"
sed 's/^/  /' <<<"$unexpected"
echo "the outcome did not match what was expected"
exit $(( code == 0 ? 1 : code ))
