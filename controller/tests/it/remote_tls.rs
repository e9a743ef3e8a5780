//! `harness run --sandbox https://…` against a real sandbox-server serving TLS and mutual TLS
//! with certificates made here; a certificate problem is one clear error, not a retry.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common;

/// A sandbox-server on 127.0.0.1:0 serving HTTPS with the files in `dir`; with `client_ca`,
/// mutual TLS. Returns the child and its `https://localhost:PORT` URL.
fn start_tls_server(workspace: &Path, dir: &Path, client_ca: bool) -> (Server, String) {
    let mut command = testkit::serve(common::sandbox_server(), workspace);
    command
        .arg("--token-file")
        .arg(dir.join("token"))
        .arg("--tls-cert")
        .arg(dir.join("server.pem"))
        .arg("--tls-key")
        .arg(dir.join("server.key"))
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null());
    if client_ca {
        command.arg("--client-ca").arg(dir.join("clients.pem"));
    }
    let (server, address) = testkit::spawn_server(&mut command);
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

/// The client's side of [`files`]: the paths of the server's CA, the client certificate and its
/// key.
struct ClientFiles {
    ca: String,
    cert: String,
    key: String,
}

impl ClientFiles {
    /// The flags of mutual TLS: `--sandbox-ca`, `--sandbox-client-cert`, `--sandbox-client-key`.
    fn mutual_tls(&self) -> [&str; 6] {
        [
            "--sandbox-ca",
            &self.ca,
            "--sandbox-client-cert",
            &self.cert,
            "--sandbox-client-key",
            &self.key,
        ]
    }
}

/// The server's certificate and CA, a client certificate and its CA, a token, and a script
/// that writes one file; the client's side of them.
fn files(dir: &Path) -> ClientFiles {
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
    let path = |name: &str| dir.join(name).display().to_string();
    ClientFiles {
        ca: path("ca.pem"),
        cert: path("client.pem"),
        key: path("client.key"),
    }
}

async fn run(dir: &Path, url: &str, tls: &[&str]) -> common::Run {
    run_with(dir, "token", url, tls).await
}

/// As [`run`], with the token in `dir/token_name`.
async fn run_with(dir: &Path, token_name: &str, url: &str, tls: &[&str]) -> common::Run {
    let script = format!("script:{}", dir.join("script.yaml").display());
    let token = dir.join(token_name);
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
    common::harness(&args, Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_runs_on_a_sandbox_over_tls_and_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let client = files(dir.path());
    let ca = &client.ca;

    let workspace = tempfile::tempdir().unwrap();
    let (server, url) = start_tls_server(workspace.path(), dir.path(), false);
    let done = run(dir.path(), &url, &["--sandbox-ca", ca]).await;
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
    let done = run(dir.path(), &url, &client.mutual_tls()).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(workspace.path().join("tls.txt").is_file());
    // No client certificate: the server's refusal is named.
    let refused = run(dir.path(), &url, &["--sandbox-ca", ca]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("TLS handshake with")
            && refused.stderr.contains("--sandbox-client-cert"),
        "{}",
        refused.stderr
    );
    // A missing file is named by its flag.
    let missing = run(dir.path(), &url, &["--sandbox-ca", "/nonexistent/ca.pem"]).await;
    missing.assert_stderr_has(1, "--sandbox-ca /nonexistent/ca.pem");
    drop(server);
}

/// `harness sandboxes token …` against the sandbox at `url`, with the root token.
async fn tokens(dir: &Path, url: &str, tls: &[&str], args: &[&str]) -> common::Run {
    let root = dir.join("token").display().to_string();
    let mut all = vec!["sandboxes", "token"];
    all.extend_from_slice(&args[..1]);
    all.extend_from_slice(&["--sandbox", url, "--sandbox-token-file", &root]);
    all.extend_from_slice(tls);
    all.extend_from_slice(&args[1..]);
    common::harness(&all, Duration::from_secs(30)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_mints_a_narrow_token_for_an_agent_and_revokes_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = files(dir.path());
    let path = |name: &str| dir.path().join(name).display().to_string();
    let tls = client.mutual_tls();
    let workspace = tempfile::tempdir().unwrap();
    let (_server, url) = start_tls_server(workspace.path(), dir.path(), true);

    let agent = path("agent-token");
    let minted = tokens(
        dir.path(),
        &url,
        &tls,
        &[
            "mint",
            "--scopes",
            "read,write,run",
            "--ttl",
            "10m",
            "--name",
            "agent",
            "--out",
            &agent,
        ],
    )
    .await;
    assert_eq!(minted.code, 0, "{}", minted.stderr);
    let info: serde_json::Value = serde_json::from_str(&minted.stdout).unwrap();
    assert_eq!(
        info["scopes"],
        serde_json::json!(["read", "write", "run"]),
        "{info}"
    );
    assert!(
        info.get("token").is_none(),
        "the secret was printed: {info}"
    );
    let secret = std::fs::read_to_string(&agent).unwrap();
    assert!(secret.starts_with("sbt_"), "{secret}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&agent).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The agent's session runs on its narrow token.
    let done = run_with(dir.path(), "agent-token", &url, &tls).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(workspace.path().join("tls.txt").is_file());

    // A viewer's token reads, and a session on it is refused with the scope named.
    let viewer = tokens(
        dir.path(),
        &url,
        &tls,
        &[
            "mint", "--scopes", "read", "--ttl", "5m", "--name", "viewer",
        ],
    )
    .await;
    assert_eq!(viewer.code, 0, "{}", viewer.stderr);
    let viewer: serde_json::Value = serde_json::from_str(&viewer.stdout).unwrap();
    std::fs::write(
        dir.path().join("viewer-token"),
        viewer["token"].as_str().unwrap(),
    )
    .unwrap();
    let refused = run_with(dir.path(), "viewer-token", &url, &tls).await;
    refused.assert_stderr_has(
        1,
        "lacks the `write` scope, which POST /v1/tools/write_file needs",
    );

    let listed = tokens(dir.path(), &url, &tls, &["list"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("\"agent\"") && listed.stdout.contains("\"viewer\""),
        "{}",
        listed.stdout
    );
    assert!(!listed.stdout.contains("sbt_"), "{}", listed.stdout);

    let id = info["id"].as_str().unwrap();
    let revoked = tokens(dir.path(), &url, &tls, &["revoke", id]).await;
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    let after = run_with(dir.path(), "agent-token", &url, &tls).await;
    assert_ne!(after.code, 0, "{}", after.stderr);
    assert!(after.stderr.contains("was revoked"), "{}", after.stderr);

    // A scope that is not one is named before anything is sent.
    let bad = tokens(
        dir.path(),
        &url,
        &tls,
        &["mint", "--scopes", "read,root", "--ttl", "5m"],
    )
    .await;
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.contains("`root` is not a scope"),
        "{}",
        bad.stderr
    );
}
