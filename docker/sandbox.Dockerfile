# The sandbox-server in an image fit for agent work: bash, coreutils, git, python3; a non-root
# user; the workspace at /workspace; the token from a file (a mounted secret); a health check;
# listening on all interfaces inside the container (it has a token, so it may).
#
# The server is the lean static build made on the host (one per workspace, thousands at a time:
# the size-optimised `server` profile idles at about 8 MiB), so the image builds in seconds:
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile server -p sandbox-server --target x86_64-unknown-linux-gnu
#   docker build -f docker/sandbox.Dockerfile -t agent-harness/sandbox .
# BASE picks the base image: a registry's (the default) or one built with no registry by
# docker/build-base-image.sh:
#   docker build --build-arg BASE=agent-harness/base:bookworm -f docker/sandbox.Dockerfile .
ARG BASE=debian:bookworm-slim
FROM ${BASE}

# A base without these (a slim registry image) gets them from the distribution's packages.
RUN if ! command -v git >/dev/null || ! command -v python3 >/dev/null || ! command -v curl >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends bash coreutils git python3 ca-certificates curl procps \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --uid 10001 --user-group --create-home --shell /bin/bash sandbox \
 && mkdir -p /workspace \
 && chown sandbox:sandbox /workspace

COPY target/x86_64-unknown-linux-gnu/server/sandbox-server /usr/local/bin/sandbox-server

USER 10001:10001
WORKDIR /workspace
ENV SANDBOX_WORKSPACE=/workspace \
    SANDBOX_LISTEN=0.0.0.0:8080 \
    SANDBOX_TOKEN_FILE=/run/secrets/sandbox-token \
    SANDBOX_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=2s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/healthz > /dev/null || exit 1
ENTRYPOINT ["/usr/local/bin/sandbox-server", "serve"]
