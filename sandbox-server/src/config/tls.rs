//! The TLS flags of `serve`: a certificate and key to serve HTTPS with, and a CA whose client
//! certificates are then required (mutual TLS).

use std::path::PathBuf;

use super::ConfigError;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate first). Read
    /// again when the file changes or on SIGHUP, so a rotated certificate needs no restart;
    /// plain HTTP on the port is then refused. Needs `--tls-key`.
    #[arg(
        long,
        env = "SANDBOX_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1). Needs `--tls-cert`.
    #[arg(
        long,
        env = "SANDBOX_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate issued by this CA (PEM; mutual TLS): a connection without
    /// one is refused in the handshake. Needs `--tls-cert`.
    #[arg(
        long,
        env = "SANDBOX_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub client_ca: Option<PathBuf>,
}

/// The files TLS is served from, checked to load once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The files, when TLS is asked for; an error naming the flag when one cannot be read.
    pub fn files(&self) -> Result<Option<TlsFiles>, ConfigError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.client_ca.clone(),
        };
        crate::http::tls::load(&files).map_err(ConfigError::Tls)?;
        Ok(Some(files))
    }
}
