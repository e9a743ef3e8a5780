//! The built-in tools, one file each. Their names and descriptions follow the seed harness.

mod bash;
pub mod read_file;
mod search_replace;
mod write_file;

pub use bash::Bash;
pub use read_file::ReadFile;
pub use search_replace::SearchReplace;
pub use write_file::WriteFile;

use super::registry::{Registry, ToolError};
use super::workspace::WorkspaceError;

fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path: must not be empty".to_owned());
    }
    if path.contains('\0') {
        return Err("path: contains a NUL byte".to_owned());
    }
    Ok(())
}

fn io_failure(path: &str, source: std::io::Error) -> ToolError {
    ToolError::Workspace(WorkspaceError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The built-in tools, in the order the model sees them.
pub fn builtin() -> Registry {
    let mut registry = Registry::default();
    registry.register(Bash);
    registry.register(ReadFile);
    registry.register(WriteFile);
    registry.register(SearchReplace);
    registry
}
