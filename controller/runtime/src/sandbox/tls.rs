//! The controller's side of a sandbox behind TLS: a CA to trust besides the system's store
//! (`--sandbox-ca`), and the client certificate a mutual-TLS sandbox asks for
//! (`--sandbox-client-cert`, `--sandbox-client-key`).

use std::path::{Path, PathBuf};

/// Which TLS files a sandbox client uses; none by default (the system's CA store alone).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM certificates of CAs to trust for the sandbox's certificate.
    pub ca: Option<PathBuf>,
    /// A PEM client certificate (chain) and its key, for mutual TLS.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// A TLS file that cannot be used, named by its flag.
#[derive(Debug, thiserror::Error)]
#[error("--{flag} {path}: {why}")]
pub struct TlsFileError {
    flag: &'static str,
    path: String,
    why: String,
}

impl ClientTls {
    /// Adds the CA and the client certificate to a client being built.
    pub(crate) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TlsFileError> {
        if let Some(ca) = &self.ca {
            let pem = read("sandbox-ca", ca)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|certs| !certs.is_empty())
                .ok_or_else(|| TlsFileError {
                    flag: "sandbox-ca",
                    path: ca.display().to_string(),
                    why: "no PEM certificate in it (`-----BEGIN CERTIFICATE-----`)".to_owned(),
                })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        match (&self.client_cert, &self.client_key) {
            (None, None) => {}
            (Some(cert), Some(key)) => {
                let mut pem = read("sandbox-client-cert", cert)?;
                pem.push(b'\n');
                pem.extend(read("sandbox-client-key", key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|err| TlsFileError {
                    flag: "sandbox-client-cert",
                    path: cert.display().to_string(),
                    why: format!(
                        "with --sandbox-client-key {}: not a PEM certificate and its key ({err})",
                        key.display()
                    ),
                })?;
                builder = builder.identity(identity);
            }
            (Some(path), None) | (None, Some(path)) => {
                let flag = match self.client_cert {
                    Some(_) => "sandbox-client-cert",
                    None => "sandbox-client-key",
                };
                return Err(TlsFileError {
                    flag,
                    path: path.display().to_string(),
                    why: "needs --sandbox-client-cert and --sandbox-client-key together".to_owned(),
                });
            }
        }
        Ok(builder)
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|err| TlsFileError {
        flag,
        path: path.display().to_string(),
        why: err.to_string(),
    })
}
