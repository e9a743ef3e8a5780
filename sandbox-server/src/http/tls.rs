//! HTTPS (rustls, with the `ring` provider; no OpenSSL): the server's certificate, read again
//! when its files change or on SIGHUP; client certificates from a CA when asked (mutual TLS);
//! and a clear answer, not a hang, to plain HTTP sent to a TLS port.
//!
//! A reload that fails (a half-written file, a key that does not fit) keeps the previous
//! configuration and says why in the log; connections already open keep theirs.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::config::TlsFiles;

/// How often the files are looked at for a change.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// How long a client may take to start its handshake and to finish it.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS record of type handshake opens every TLS connection; an HTTP request opens with a
/// method's letters.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Why the TLS files cannot be served, naming the flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert {path}: {why}")]
    Cert { path: String, why: String },
    #[error("--tls-key {path}: {why}")]
    Key { path: String, why: String },
    #[error("--client-ca {path}: {why}")]
    ClientCa { path: String, why: String },
    #[error("--tls-cert and --tls-key: {0}")]
    Pair(String),
}

/// Builds the server's TLS configuration from its files.
pub fn load(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_path = files.cert.display().to_string();
    let certs = certificates(&files.cert).map_err(|why| TlsError::Cert {
        path: cert_path.clone(),
        why,
    })?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|err| TlsError::Key {
        path: files.key.display().to_string(),
        why: format!("no private key read ({err}); expected a PEM key (PKCS#8, PKCS#1 or SEC1)"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| TlsError::Pair(err.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let bad = |why: String| TlsError::ClientCa {
                path: ca.display().to_string(),
                why,
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca).map_err(bad)? {
                roots
                    .add(cert)
                    .map_err(|err| bad(format!("not a CA certificate: {err}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|err| bad(err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|err| TlsError::Pair(format!("the key does not fit the certificate: {err}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| format!("cannot read PEM certificates: {err}"))?;
    if certs.is_empty() {
        return Err("no certificate in it (expected `-----BEGIN CERTIFICATE-----`)".to_owned());
    }
    Ok(certs)
}

/// The TLS a server serves: its configuration now, and the files it comes from.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' modification times and sizes at the last load.
    stamps: Mutex<Vec<Option<(SystemTime, u64)>>>,
}

impl Tls {
    pub fn new(files: &TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let config = load(files)?;
        let tls = Tls {
            files: files.clone(),
            current: RwLock::new(config),
            stamps: Mutex::new(Vec::new()),
        };
        *tls.stamps.lock().unwrap_or_else(|e| e.into_inner()) = tls.stamps_now();
        Ok(Arc::new(tls))
    }

    /// Whether client certificates are required.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    fn stamps_now(&self) -> Vec<Option<(SystemTime, u64)>> {
        let files = [Some(&self.files.cert), Some(&self.files.key)];
        files
            .into_iter()
            .chain([self.files.client_ca.as_ref()])
            .flatten()
            .map(|path| {
                let meta = std::fs::metadata(path).ok()?;
                Some((meta.modified().ok()?, meta.len()))
            })
            .collect()
    }

    /// Loads the files again; on failure the configuration in force stays.
    pub fn reload(&self, why: &str) {
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = self.stamps_now();
        match load(&self.files) {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
                tracing::info!(why, "reloaded the TLS certificate");
            }
            Err(err) => {
                tracing::warn!(why, cause = %err, "the TLS files could not be reloaded; the previous certificate stays in force");
            }
        }
    }

    /// Reloads on SIGHUP and when a file changes, for as long as the task lives. The signal
    /// handler is installed before this returns: a SIGHUP no longer ends the server.
    pub fn watch(self: &Arc<Self>) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup())?;
        let tls = self.clone();
        Ok(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = hangup.recv() => tls.reload("SIGHUP"),
                    () = tokio::time::sleep(WATCH_EVERY) => {
                        let changed = {
                            let stamps = tls.stamps.lock().unwrap_or_else(|e| e.into_inner());
                            *stamps != tls.stamps_now()
                        };
                        if changed {
                            tls.reload("a file changed");
                        }
                    }
                }
            }
        }))
    }

    /// The TLS session of a new connection; `None` when there is none to serve (plain HTTP,
    /// which is answered and closed here; a failed or slow handshake, logged).
    pub(super) async fn accept(&self, stream: TcpStream) -> Option<TlsStream<TcpStream>> {
        let mut first = [0u8; 1];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) => {}
            _ => return None,
        }
        if first[0] != TLS_HANDSHAKE_RECORD {
            refuse_plain_http(stream).await;
            return None;
        }
        let config = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(err)) => {
                tracing::info!(cause = %err, "a TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!("a TLS handshake took too long");
                None
            }
        }
    }
}

/// Answers a plain-HTTP request on the TLS port with a 400 that says to use `https://`, once
/// its head is read (closing on an unread request would reset the connection before the
/// client reads the answer).
async fn refuse_plain_http(mut stream: TcpStream) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        while head.len() < 16 * 1024 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    let body = serde_json::to_string(&sandbox_protocol::ErrorResponse::new(
        sandbox_protocol::ErrorType::BadRequest,
        "this server speaks HTTPS only (TLS is on): use an https:// address".to_owned(),
    ))
    .unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The subject of the client's certificate (`CN=agent-1,O=lab`), under mutual TLS: the
/// caller's name in the audit log.
pub(super) fn peer_subject(connection: &rustls::ServerConnection) -> Option<Arc<str>> {
    let certificate = connection.peer_certificates()?.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    Some(Arc::from(parsed.subject().to_string()))
}
