# The statically linked sandbox-server alone, FROM scratch: deploy/benchmark's init container
# copies it (`sandbox-server install DIR`) into a volume that a benchmark task's own image runs
# it from. It needs no libraries, so it runs in any Linux image.
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile server -p sandbox-server --target x86_64-unknown-linux-gnu
#   docker build -f docker/sandbox-static.Dockerfile -t agent-harness/sandbox-static .
FROM scratch
COPY target/x86_64-unknown-linux-gnu/server/sandbox-server /sandbox-server
USER 10001:10001
ENTRYPOINT ["/sandbox-server"]
