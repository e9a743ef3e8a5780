# The harness (controller) in an image, with a sandbox-server beside it for `--sandbox local`
# (one pod, two processes) and the same base as the sandbox. The server is the sandbox image's
# (the static `server` profile build, docker/README.md); `harness` is the release build:
#   docker build -f docker/controller.Dockerfile -t agent-harness/controller .
ARG BASE=debian:bookworm-slim
FROM ${BASE}

RUN if ! command -v git >/dev/null || ! command -v python3 >/dev/null || ! command -v curl >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends bash coreutils git python3 ca-certificates curl procps \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --uid 10001 --user-group --create-home --shell /bin/bash harness \
 && mkdir -p /workspace /runs \
 && chown harness:harness /workspace /runs

COPY target/release/harness target/x86_64-unknown-linux-gnu/server/sandbox-server /usr/local/bin/

USER 10001:10001
WORKDIR /workspace
ENV CONTROLLER_LOG_DIR=/runs
ENTRYPOINT ["/usr/local/bin/harness"]
CMD ["--help"]
