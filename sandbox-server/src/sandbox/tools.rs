//! The built-in tools, one file each. Their names and descriptions follow the seed harness.

pub(crate) mod bash;
mod exec;
pub mod read_file;
mod search_replace;
mod shell;
mod write_file;

pub use bash::Bash;
pub use exec::{Exec, WriteStdin};
pub use read_file::ReadFile;
pub use search_replace::SearchReplace;
pub use shell::{MODEL_SHELL_ID, Shell};
pub use write_file::WriteFile;

use super::registry::{Registry, ToolError};
use super::workspace::WorkspaceError;
use sandbox_protocol::BuiltIn;

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

/// Every built-in tool, in the order the model sees them: the four defaults, then the opt-in
/// `exec`, `write_stdin` and `shell` (`--tools`).
pub fn builtin() -> Registry {
    let mut registry = Registry::default();
    registry.register(Bash);
    registry.register(ReadFile);
    registry.register(WriteFile);
    registry.register(SearchReplace);
    registry.register(Exec);
    registry.register(WriteStdin);
    registry.register(Shell);
    registry
}

/// The tools enabled when `--tools` does not say: the seed's four.
pub fn default_tools() -> Registry {
    let names = BuiltIn::DEFAULT.map(|tool| tool.as_str().to_owned());
    builtin()
        .select(&names)
        .expect("the default tools are built in")
}
