//! `harness run --sandbox https://…` against a real sandbox-server serving TLS and mutual TLS
//! with certificates made here; a certificate problem is one clear error, not a retry.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;

/// A sandbox-server on 127.0.0.1:0 serving HTTPS with the files in `dir`; with `client_ca`,
/// mutual TLS. Returns the child and its `https://localhost:PORT` URL.
fn start_tls_server(workspace: &Path, dir: &Path, client_ca: bool) -> (Server, String) {
    let mut command = Command::new(common::sandbox_server());
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(workspace)
        .arg("--token-file")
        .arg(dir.join("token"))
        .arg("--tls-cert")
        .arg(dir.join("server.pem"))
        .arg("--tls-key")
        .arg(dir.join("server.key"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if client_ca {
        command.arg("--client-ca").arg(dir.join("clients.pem"));
    }
    let mut server = command.spawn().unwrap();
    let address = common::address_line(&mut server);
    let port = address["listening"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    (Server(server), format!("https://localhost:{port}"))
}

/// A server that is killed when dropped, a failed assertion included.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's certificate and CA, a client certificate and its CA, a token, and a script
/// that writes one file.
fn files(dir: &Path) {
    let (ca, cert, key) = common::localhost_certificate();
    let (client_ca, client_cert, client_key) = common::localhost_certificate();
    for (name, text) in [
        ("ca.pem", ca),
        ("server.pem", cert),
        ("server.key", key),
        ("clients.pem", client_ca),
        ("client.pem", client_cert),
        ("client.key", client_key),
        ("token", "tls-token-0123456789\n".to_owned()),
        (
            "script.yaml",
            "turns:\n  - tool_calls: [{name: write_file, arguments: {path: tls.txt, content: over https}}]\n  - text: written\n"
                .to_owned(),
        ),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

async fn run(dir: &Path, url: &str, tls: &[&str]) -> common::Run {
    let script = format!("script:{}", dir.join("script.yaml").display());
    let token = dir.join("token");
    let mut args = vec![
        "run",
        "--policy",
        "allow-all",
        "--model",
        &script,
        "--sandbox",
        url,
        "--sandbox-token-file",
        token.to_str().unwrap(),
    ];
    args.extend_from_slice(tls);
    args.push("Write tls.txt");
    common::run(common::command(&args), Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_runs_on_a_sandbox_over_tls_and_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    files(dir.path());
    let path = |name: &str| dir.path().join(name).display().to_string();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));

    let workspace = tempfile::tempdir().unwrap();
    let (server, url) = start_tls_server(workspace.path(), dir.path(), false);
    let done = run(dir.path(), &url, &["--sandbox-ca", &ca]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("tls.txt")).unwrap(),
        "over https"
    );
    // Without the CA: the certificate is refused and said once; the run fails at its start.
    let refused = run(dir.path(), &url, &[]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("TLS handshake with")
            && refused.stderr.contains("UnknownIssuer")
            && refused.stderr.contains("--sandbox-ca"),
        "{}",
        refused.stderr
    );
    drop(server);

    let workspace = tempfile::tempdir().unwrap();
    let (server, url) = start_tls_server(workspace.path(), dir.path(), true);
    let done = run(
        dir.path(),
        &url,
        &[
            "--sandbox-ca",
            &ca,
            "--sandbox-client-cert",
            &cert,
            "--sandbox-client-key",
            &key,
        ],
    )
    .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(workspace.path().join("tls.txt").is_file());
    // No client certificate: the server's refusal is named.
    let refused = run(dir.path(), &url, &["--sandbox-ca", &ca]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("TLS handshake with")
            && refused.stderr.contains("--sandbox-client-cert"),
        "{}",
        refused.stderr
    );
    // A missing file is named by its flag.
    let missing = run(dir.path(), &url, &["--sandbox-ca", "/nonexistent/ca.pem"]).await;
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("--sandbox-ca /nonexistent/ca.pem"),
        "{}",
        missing.stderr
    );
    drop(server);
}
