//! The built-in tools, one file each. Their names and descriptions follow the seed harness.

mod bash;
mod read_file;
mod search_replace;
mod write_file;

pub use bash::Bash;
pub use read_file::ReadFile;
pub use search_replace::SearchReplace;
pub use write_file::WriteFile;

use super::registry::ToolError;
use super::workspace::WorkspaceError;

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ToolError::Internal(format!("file task failed: {err}")))?
}

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path: must not be empty".to_owned());
    }
    Ok(())
}

fn io_failure(path: &str, source: std::io::Error) -> ToolError {
    ToolError::Workspace(WorkspaceError::Io {
        path: path.to_owned(),
        source,
    })
}
