//! The domain: the tool trait and registry, the built-in tools, the workspace boundary and
//! output capture. Nothing here knows about HTTP.

pub mod archive;
pub mod blobs;
pub mod fingerprint;
pub mod output;
pub mod processes;
pub mod registry;
pub mod snapshot;
pub mod tools;
pub mod walk;
pub mod workspace;

pub use registry::{Registry, Tool, ToolContext, ToolError, ToolLimits, Validate};

/// Runs blocking work (the file system, `/proc`) off the async threads. The one helper for it:
/// a task that panicked is an internal error.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ToolError::Internal(format!("a blocking task failed: {err}")))
}
