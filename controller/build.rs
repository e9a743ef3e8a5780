//! Tests that need what a plain machine lacks (a Docker engine, kubectl, Chromium) run when
//! their variable is set; otherwise they return early. So that a skip is never silent, a debug
//! build (what `cargo test` makes) warns about each variable that is not set. `.ci/run` sets
//! them all.

fn main() {
    let testing = std::env::var("PROFILE").is_ok_and(|profile| profile == "debug");
    for (variable, what) in [
        (
            "HARNESS_TEST_DOCKER",
            "the Docker, benchmark and deploy-job tests",
        ),
        ("HARNESS_TEST_DEPLOY", "the Kubernetes manifest tests"),
        (
            "HARNESS_TEST_BROWSER",
            "the transcript's headless-browser check",
        ),
        (
            "HARNESS_TEST_MCP_PYTHON",
            "the MCP tools test (a Python with the official `mcp` SDK)",
        ),
        (
            "HARNESS_TEST_PROMETHEUS",
            "the test where a real Prometheus scrapes a server and a batch",
        ),
        (
            "HARNESS_TEST_PLAYWRIGHT_PYTHON",
            "the viewer's browser test (a Python with Playwright, driving Debian's Chromium)",
        ),
        (
            "HARNESS_TEST_OTLP_PYTHON",
            "the trace test (a Python with opentelemetry-proto for the OTLP receiver)",
        ),
    ] {
        println!("cargo::rerun-if-env-changed={variable}");
        let set = std::env::var(variable).is_ok_and(|value| !value.is_empty() && value != "0");
        if testing && !set {
            println!(
                "cargo::warning={variable} is not set: {what} will skip (bash .ci/run sets it up)"
            );
        }
    }
}
