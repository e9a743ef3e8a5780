//! The Python SDK (`clients/python`): its models are the committed OpenAPI document's, and it
//! drives an agent-like session (write, run, follow a process through a cut connection,
//! snapshot, changes, restore, shells, the terminal, scoped tokens, typed errors; sync and
//! async) against a real server over mutual TLS, with certificates made here; `pytest tests`
//! also runs the archive download's retry on 429 (`test_archive_retry.py`, no server needed).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;
use crate::tls::Ca;

fn sdk() -> PathBuf {
    testkit::repo_root().join("clients/python")
}

/// Standard library only: runs wherever `python3` does, so a stale model file always fails.
#[test]
fn the_sdk_models_are_generated_from_the_committed_document() {
    let out = Command::new("python3")
        .arg(sdk().join("tools/generate_models.py"))
        .arg("--check")
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_python_sdk),
    ignore = "needs HARNESS_TEST_PYTHON_SDK=PATH (bash .ci/run sets it up)"
)]
async fn the_sdk_drives_a_session_over_mutual_tls() {
    let python = testkit::gates::value("HARNESS_TEST_PYTHON_SDK");
    let ca = Ca::new("sdk test CA");
    let clients = Ca::new("sdk client CA");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"], "sandbox", false);
    let (client_cert, client_key) = clients.issue(&[], "sdk-agent", false);
    let token = "sdk-test-root-token-0123456789";
    let server = common::start_with_args([
        "--tls-cert".to_owned(),
        write("server.pem", &cert),
        "--tls-key".to_owned(),
        write("server.key", &key),
        "--client-ca".to_owned(),
        write("clients.pem", &clients.pem()),
        "--token-file".to_owned(),
        write("token", token),
    ])
    .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let (ca_path, cert_path, key_path) = (
        write("ca.pem", &ca.pem()),
        write("client.pem", &client_cert),
        write("client.key", &client_key),
    );
    let mut command = tokio::process::Command::new(&python);
    command
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(sdk())
        .env("SANDBOX_ADDR", &address)
        .env("SANDBOX_TOKEN", token)
        .env("SANDBOX_CA", &ca_path)
        .env("SANDBOX_CERT", &cert_path)
        .env("SANDBOX_KEY", &key_path)
        .stdin(Stdio::null());
    let ran = crate::contract::run_bounded(command, Duration::from_secs(300), &server).await;
    assert!(ran.success, "{}\n{}", ran.stdout, ran.stderr);
    // 3 session tests, 10 of the archive's retry (5, each on the sync and async client) and 2
    // that the token never shows in a repr.
    assert!(ran.stdout.contains("15 passed"), "{}", ran.stdout);

    // The README's first example runs as it is written.
    let readme = std::fs::read_to_string(sdk().join("README.md")).unwrap();
    let example = readme
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a python example in the README");
    let port = address.rsplit(':').next().unwrap();
    let mut command = tokio::process::Command::new(&python);
    command
        .args(["-c", example])
        .env("SANDBOX_URL", format!("https://localhost:{port}"))
        .env("SANDBOX_TOKEN", token)
        .env("SANDBOX_CA", &ca_path)
        .env("SANDBOX_CERT", &cert_path)
        .env("SANDBOX_KEY", &key_path)
        .stdin(Stdio::null());
    let ran = crate::contract::run_bounded(command, Duration::from_secs(120), &server).await;
    assert!(ran.success, "{}\n{}", ran.stdout, ran.stderr);
    for expected in [
        "0 exit=0",
        "hello, sandbox",
        "stdout step 3",
        "exit code 0",
        "('hello.py', 'added')",
        "refused: missing_scope",
    ] {
        assert!(
            ran.stdout.contains(expected),
            "{expected:?} not in\n{}",
            ran.stdout
        );
    }
}
