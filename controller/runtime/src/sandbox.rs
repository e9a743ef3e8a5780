//! Reaching, starting and filling sandboxes: everything the controller knows about the other
//! side of the wire.
//!
//! - [`client`]: the typed HTTP client of one sandbox-server; it speaks the wire types.
//! - [`local`]: a sandbox-server child process over a folder on this machine.
//! - [`docker`]: a fresh container per session through the Docker Engine API, and `prune`.
//! - [`pool`]: running servers, leased one session at a time and reset between them.
//! - [`seed`]: copying a folder, a tar archive or a git commit into a sandbox.

pub mod client;
pub mod docker;
pub mod failure;
pub mod local;
pub mod pool;
pub mod seed;
pub mod tls;

pub use client::{CallOptions, LiveOutput, SandboxClient, SandboxError, ToolReply};
pub use failure::{Doing, Failure};
pub use tls::{ClientTls, TlsFileError};

/// A sandbox's network, as its server's `--network` flag sets it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Commands may open only Unix sockets: they reach no address.
    #[default]
    None,
    /// Commands use the network of the machine (or container) the server runs in.
    Host,
}

sandbox_protocol::serde_names!(NetworkMode);

/// Why a sandbox could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The input is at fault (a folder that is not empty, an image the engine does not have):
    /// not worth a retry.
    #[error("{0}")]
    BadInput(String),
    /// The machine, the engine or the server failed: worth a retry on a fresh sandbox.
    #[error(transparent)]
    Failed(#[from] Failure),
}
