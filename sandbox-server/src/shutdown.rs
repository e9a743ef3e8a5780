//! The shutdown signal: SIGTERM or SIGINT.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Installs the SIGTERM and SIGINT handlers now, and returns a future that resolves on the first
/// of them. Call it before announcing the address: a signal that arrives before the handlers
/// exist would kill the server without its cleanup.
pub fn install() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received; shutting down"),
        }
    })
}
