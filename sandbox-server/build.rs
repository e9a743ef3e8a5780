//! Tests that need third-party tools (schemathesis, openapi-python-client, Chromium) run when
//! their variable is set; otherwise they return early. So that a skip is never silent, a debug
//! build (what `cargo test` makes) warns about each variable that is not set. `.ci/run`
//! installs the tools and sets them.

fn main() {
    let testing = std::env::var("PROFILE").is_ok_and(|profile| profile == "debug");
    for (variable, what) in [
        (
            "HARNESS_TEST_SCHEMATHESIS",
            "the schemathesis run against a live server",
        ),
        ("HARNESS_TEST_OPENAPI_CLIENT", "the generated-client test"),
        (
            "HARNESS_TEST_BROWSER",
            "the /docs page's headless-browser check",
        ),
        (
            "HARNESS_TEST_MCP_PYTHON",
            "the MCP test (a Python with the official `mcp` SDK)",
        ),
        (
            "HARNESS_TEST_PROMETHEUS",
            "promtool's check of the /metrics exposition",
        ),
        (
            "HARNESS_TEST_PYTHON_SDK",
            "the Python SDK's session over mutual TLS (a Python with `pip install ./clients/python pytest`)",
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
