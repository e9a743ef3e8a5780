//! HTTPS and mutual TLS, with certificates made here: a CA, server and client certificates, an
//! expired one, one for another name, and a second CA to rotate to.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};

use crate::common::{self, Answer};

/// The audit log, over mutual TLS and by size.
mod audit;

/// A CA that signs certificates.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (its PEM, its key's PEM), valid now unless `expired`.
    pub(crate) fn issue(&self, names: &[&str], subject: &str, expired: bool) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, subject);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// The files a server is started with.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        // Written whole, then renamed: a reload never reads half a file.
        let part = self.dir.path().join(format!("{name}.part"));
        std::fs::write(&part, text).unwrap();
        std::fs::rename(&part, &path).unwrap();
        path
    }

    fn server_pair(&self, (cert, key): &(String, String)) -> Vec<String> {
        let cert = self.write("server.pem", cert);
        let key = self.write("server.key", key);
        vec![
            "--tls-cert".to_owned(),
            cert.display().to_string(),
            "--tls-key".to_owned(),
            key.display().to_string(),
        ]
    }
}

/// A server started with `args`, its address line, and its log.
struct Started {
    child: Child,
    line: Value,
    _workspace: tempfile::TempDir,
}

impl Started {
    fn port(&self) -> u16 {
        let address = self.line["listening"].as_str().unwrap();
        address.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port())
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        common::signal(self.child.id(), "TERM");
        let _ = common::wait_exit(&mut self.child, Duration::from_secs(10));
        let _ = self.child.kill();
    }
}

fn start(args: &[String]) -> Started {
    let workspace = tempfile::tempdir().unwrap();
    let mut command = testkit::serve(common::binary(), workspace.path());
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let (child, line) = testkit::spawn_server(&mut command);
    Started {
        child,
        line,
        _workspace: workspace,
    }
}

/// What a server started with `args` says before it serves: its exit and its error.
fn refused(args: &[String]) -> String {
    let workspace = tempfile::tempdir().unwrap();
    let out = testkit::serve(common::binary(), workspace.path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started with {args:?}");
    assert!(out.stdout.is_empty(), "it announced an address");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A client that trusts only `ca`, with a client certificate when given.
fn client(ca: &str, identity: Option<&(String, String)>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(Duration::from_secs(10));
    if let Some((cert, key)) = identity {
        let pem = format!("{cert}{key}");
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// The error of a request, with all its causes.
async fn failure(client: &reqwest::Client, url: &str) -> String {
    let err = client
        .get(url)
        .send()
        .await
        .expect_err("the request got through");
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A server's flags for mutual TLS: its certificate from `ca`, clients' from `clients`.
fn mutual(files: &Files, ca: &Ca, clients: &Ca) -> Vec<String> {
    let mut args = files.server_pair(&localhost(ca));
    let client_ca = files.write("clients.pem", &clients.pem());
    args.extend(["--client-ca".to_owned(), client_ca.display().to_string()]);
    args
}

fn localhost(ca: &Ca) -> (String, String) {
    ca.issue(&["localhost", "127.0.0.1"], "sandbox", false)
}

#[tokio::test]
async fn https_serves_calls_and_plain_http_is_told_to_use_it() {
    let ca = Ca::new("test CA");
    let files = Files::new();
    let server = start(&files.server_pair(&localhost(&ca)));
    assert_eq!(server.line["tls"], true, "{}", server.line);
    assert_eq!(server.line["mtls"], false, "{}", server.line);
    let client = client(&ca.pem(), None);
    let health = client.get(server.url("/healthz")).json_body().await;
    assert_eq!(
        (&health["tls"], &health["mtls"]),
        (&json!(true), &json!(false))
    );
    let bash = |cmd: &str| {
        client
            .post(server.url("/v1/tools/bash"))
            .json(&json!({ "cmd": cmd }))
    };
    let (status, result) = bash("echo over tls").answer().await;
    assert_eq!(status, 200);
    assert!(
        result["output"].as_str().unwrap().contains("over tls"),
        "{result}"
    );
    // The server's private key is no command's to read.
    let key = files.dir.path().join("server.key");
    let result = bash(&format!("cat {}", key.display())).json_body().await;
    let output = result["output"].as_str().unwrap();
    // Refused (Landlock), or an empty file in its place (the commands' mount namespace).
    assert!(
        !output.contains("PRIVATE KEY") && (result["exit_code"] != 0 || result["stdout"] == ""),
        "{result}"
    );

    // The same port in plain HTTP: an answer that says what to do, not a hang.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (status, body) = plain
        .get(format!("http://127.0.0.1:{}/healthz", server.port()))
        .answer()
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "bad_request", "{body}");
    assert!(common::error_message(&body).contains("https://"), "{body}");
}

#[tokio::test]
async fn a_certificate_problem_is_named_by_the_client() {
    let ca = Ca::new("test CA");
    let files = Files::new();
    let server = start(&files.server_pair(&localhost(&ca)));
    let stranger = Ca::new("another CA");
    let text = failure(&client(&stranger.pem(), None), &server.url("/healthz")).await;
    assert!(text.contains("UnknownIssuer"), "{text}");

    let other_name = ca.issue(&["elsewhere.example"], "elsewhere", false);
    let server = start(&Files::new().server_pair(&other_name));
    let text = failure(&client(&ca.pem(), None), &server.url("/healthz")).await;
    assert!(text.contains("not valid for name \"localhost\""), "{text}");

    let expired = ca.issue(&["localhost"], "old", true);
    let server = start(&Files::new().server_pair(&expired));
    let text = failure(&client(&ca.pem(), None), &server.url("/healthz")).await;
    assert!(text.to_lowercase().contains("expired"), "{text}");
}

#[tokio::test]
async fn mutual_tls_takes_only_client_certificates_from_its_ca() {
    let ca = Ca::new("test CA");
    let clients = Ca::new("client CA");
    let files = Files::new();
    let server = start(&mutual(&files, &ca, &clients));
    assert_eq!(server.line["mtls"], true, "{}", server.line);

    let url = server.url("/healthz");
    failure(&client(&ca.pem(), None), &url).await;
    let foreign = ca.issue(&[], "not from the client CA", false);
    failure(&client(&ca.pem(), Some(&foreign)), &url).await;

    let agent = clients.issue(&[], "agent-7", false);
    let health = client(&ca.pem(), Some(&agent)).get(&url).json_body().await;
    assert_eq!(
        (&health["tls"], &health["mtls"]),
        (&json!(true), &json!(true))
    );
}

/// Polls until a client that trusts only `ca` gets through, for at most ten seconds.
async fn served_by(server: &Started, ca: &Ca) -> bool {
    let client = client(&ca.pem(), None);
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..100 {
        if client.get(server.url("/healthz")).send().await.is_ok() {
            return true;
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let first = Ca::new("first CA");
    let files = Files::new();
    let server = start(&files.server_pair(&localhost(&first)));
    assert!(served_by(&server, &first).await);

    // Rotated on SIGHUP.
    let second = Ca::new("second CA");
    files.server_pair(&localhost(&second));
    common::signal(server.child.id(), "HUP");
    assert!(served_by(&server, &second).await, "SIGHUP did not reload");

    // A broken file keeps the certificate in force.
    files.write("server.pem", "not a certificate\n");
    common::signal(server.child.id(), "HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(served_by(&server, &second).await, "a bad file replaced it");

    // Rotated by a change of the files alone.
    let third = Ca::new("third CA");
    files.server_pair(&localhost(&third));
    assert!(served_by(&server, &third).await, "the change was not seen");
}

#[test]
fn bad_tls_files_are_refused_by_name_before_the_server_listens() {
    let ca = Ca::new("test CA");
    let files = Files::new();
    let (cert, key) = localhost(&ca);
    let cert_path = files.write("c.pem", &cert);
    let key_path = files.write("k.pem", &key);
    let (_, other_key) = localhost(&ca);
    let other_key = files.write("other.key", &other_key);
    let junk = files.write("junk.pem", "hello\n");
    let arg = |p: &Path| p.display().to_string();

    let flags = |pairs: &[(&str, &Path)]| -> Vec<String> {
        pairs
            .iter()
            .flat_map(|(flag, path)| [format!("--{flag}"), arg(path)])
            .collect()
    };
    let text = refused(&flags(&[("tls-cert", &cert_path)]));
    assert!(text.contains("--tls-key"), "{text}");
    let text = refused(&flags(&[("tls-cert", &junk), ("tls-key", &key_path)]));
    assert!(
        text.contains("--tls-cert") && text.contains("no certificate"),
        "{text}"
    );
    let text = refused(&flags(&[("tls-cert", &cert_path), ("tls-key", &junk)]));
    assert!(text.contains("--tls-key"), "{text}");
    let text = refused(&flags(&[("tls-cert", &cert_path), ("tls-key", &other_key)]));
    assert!(text.contains("does not fit"), "{text}");
    let text = refused(&flags(&[
        ("tls-cert", &cert_path),
        ("tls-key", &key_path),
        ("client-ca", &junk),
    ]));
    assert!(text.contains("--client-ca"), "{text}");
}

#[test]
fn mcp_stdio_refuses_the_flags_of_an_http_address_by_name() {
    let workspace = tempfile::tempdir().unwrap();
    for flags in [
        &["--tls-cert", "c.pem", "--tls-key", "k.pem"][..],
        &["--audit-log", "audit.jsonl"][..],
    ] {
        let out = Command::new(common::binary())
            .arg("mcp-stdio")
            .arg("--workspace")
            .arg(workspace.path())
            .args(flags)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(flags[0]) && stderr.contains("mcp-stdio serves stdin and stdout"),
            "{stderr}"
        );
    }
}
