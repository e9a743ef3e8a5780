//! Tests that need what a plain machine lacks (a Docker engine, kubectl, Chromium) are marked
//! `#[ignore]` with the reason unless their variable was set when they were built, so
//! `cargo test` reports them as ignored instead of passing silently. `.ci/run` sets them all.

fn main() {
    for (variable, cfg) in [
        ("HARNESS_TEST_DOCKER", "harness_test_docker"),
        ("HARNESS_TEST_DEPLOY", "harness_test_deploy"),
        ("HARNESS_TEST_BROWSER", "harness_test_browser"),
    ] {
        println!("cargo::rerun-if-env-changed={variable}");
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if std::env::var(variable).is_ok_and(|value| value == "1") {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
