//! Why a request to a sandbox failed, and which failures are the sandbox's own.

use std::time::Duration;

use reqwest::StatusCode;
use sandbox_protocol::ErrorType;

/// Why a sandbox request failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox did not answer: it is down, unreachable or cut the connection.
    #[error("sandbox at {url} is unreachable: {message}")]
    Unreachable { url: String, message: String },
    /// Nothing listens at the sandbox's address (the connection was refused).
    #[error(
        "nothing is listening at {url}: check the URL and port, and that its sandbox-server is running (`sandbox-server serve --listen ADDR`)"
    )]
    Refused { url: String },
    /// The sandbox's TLS certificate was refused (an unknown CA, another name, expired), or it
    /// refused ours: no retry changes that.
    #[error(
        "the TLS handshake with {url} failed: {message} (--sandbox-ca names the CA that issued the sandbox's certificate; --sandbox-client-cert/--sandbox-client-key the client certificate a mutual-TLS sandbox wants)"
    )]
    Certificate { url: String, message: String },
    /// The sandbox answered with an error body; for a tool call this is the tool's failure.
    #[error("{message}")]
    Api {
        status: u16,
        error_type: ErrorType,
        message: String,
    },
    /// The sandbox answered with something that is not its API.
    #[error("sandbox at {url} answered unexpectedly: {message}")]
    BadResponse { url: String, message: String },
    /// A tool call outlived its own timeout by a wide margin: the sandbox is stuck.
    #[error(
        "sandbox at {url} gave no answer to a `{tool}` call within {} s, well past the call's own timeout: it is stuck",
        waited.as_secs()
    )]
    Stuck {
        url: String,
        tool: String,
        waited: Duration,
    },
    /// A workspace archive stopped moving (or its answer never came after it was sent): the
    /// sandbox, or the one it was copied from, is stuck.
    #[error(
        "{what} with the sandbox at {url} stalled: nothing moved for {} s after {moved} bytes",
        waited.as_secs()
    )]
    Stalled {
        url: String,
        what: String,
        moved: u64,
        waited: Duration,
    },
}

impl SandboxError {
    /// Whether the sandbox itself failed (as opposed to a tool refusing its input).
    pub fn is_infrastructure(&self) -> bool {
        match self {
            SandboxError::Unreachable { .. }
            | SandboxError::Refused { .. }
            | SandboxError::Certificate { .. }
            | SandboxError::BadResponse { .. }
            | SandboxError::Stuck { .. }
            | SandboxError::Stalled { .. } => true,
            SandboxError::Api {
                status, error_type, ..
            } => error_type.is_infrastructure(*status),
        }
    }
}

/// Whether an HTTP status means "not found" (for callers matching on errors).
pub fn is_not_found(err: &SandboxError) -> bool {
    matches!(err, SandboxError::Api { status, .. } if *status == StatusCode::NOT_FOUND.as_u16())
}
