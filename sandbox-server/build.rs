//! The tests that need third-party tools (schemathesis, openapi-python-client, Chromium) are
//! marked `#[ignore]` with the reason unless their variable, the tool's path, was set when they
//! were built, so `cargo test` reports them as ignored instead of passing silently. `.ci/run`
//! installs them and sets the variables.

fn main() {
    for (variable, cfg) in [
        ("HARNESS_TEST_SCHEMATHESIS", "harness_test_schemathesis"),
        ("HARNESS_TEST_OPENAPI_CLIENT", "harness_test_openapi_client"),
    ] {
        println!("cargo::rerun-if-env-changed={variable}");
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if std::env::var(variable).is_ok_and(|value| !value.is_empty()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    // The /docs page in a real browser: Chromium, as for the controller's transcript check.
    println!("cargo::rerun-if-env-changed=HARNESS_TEST_BROWSER");
    println!("cargo::rustc-check-cfg=cfg(harness_test_browser)");
    if std::env::var("HARNESS_TEST_BROWSER").is_ok_and(|value| value == "1") {
        println!("cargo::rustc-cfg=harness_test_browser");
    }
}
