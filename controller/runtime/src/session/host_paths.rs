//! The host folders a session writes to or runs programs from lie outside what its agent can
//! write. A local sandbox serves a folder of this host and lets commands write `--writable`
//! paths: a log folder inside one of them could have its `blobs/` swapped for a link by a
//! command, and the harness (not confined) would then write where the link points; a hooks
//! file's folder or an MCP server's working folder inside one would let a command change a
//! program the harness runs with its own environment.

use std::path::{Component, Path, PathBuf};

use crate::config::{RunConfig, SandboxTarget};
use crate::input::InputError;
use crate::mcp::Transport;

/// Refuses a session whose log folder, hooks folder or MCP servers' working folders lie inside
/// (or are) a folder its agent can write on this host.
pub(super) fn check(config: &RunConfig, log_dir: &Path) -> Result<(), InputError> {
    let writable = agent_writable(config);
    if writable.is_empty() {
        return Ok(());
    }
    let mut ours = vec![(log_dir.to_owned(), "the log folder (--log-dir)".to_owned())];
    if !config.hooks.is_empty() {
        ours.push((
            config.hooks.folder().to_owned(),
            "the hooks file's folder".to_owned(),
        ));
    }
    for (name, server) in &config.mcp.servers {
        if let Transport::Stdio { cwd, .. } = &server.transport {
            ours.push((cwd.clone(), format!("MCP server `{name}`'s working folder")));
        }
    }
    for (path, what) in ours {
        let resolved = resolve(&path);
        if let Some((_, inside)) = writable.iter().find(|(dir, _)| resolved.starts_with(dir)) {
            return Err(InputError(format!(
                "{what} {} lies inside {inside}, which the agent's commands can write: a command could replace what the harness writes or runs there; give a folder outside it",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The host folders the agent can write, resolved, each with how to name it: a local
/// sandbox's served folder (the working directory) and its `--writable` paths. None for
/// other sandboxes, and for a task whose workspace is copied into a new temporary folder.
fn agent_writable(config: &RunConfig) -> Vec<(PathBuf, String)> {
    if !matches!(config.sandbox, SandboxTarget::Local) {
        return Vec::new();
    }
    let mut writable = Vec::new();
    let served = match (&config.workspace, &config.working_dir) {
        (None, Some(dir)) | (Some(_), Some(dir)) => Some(dir.clone()),
        (None, None) => Some(PathBuf::from(".")),
        (Some(_), None) => None,
    };
    if let Some(dir) = served {
        let named = format!("the workspace {}", dir.display());
        writable.push((resolve(&dir), named));
    }
    for path in &config.writable {
        let named = format!("the --writable path {}", path.display());
        writable.push((resolve(path), named));
    }
    writable
}

/// `path` made absolute through every link of the part that exists, component by component
/// as the kernel would (`..` after a link is the parent of where it leads); the rest (not made
/// yet) is added by name.
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut resolved = PathBuf::new();
    let mut exists = true;
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
            }
            other => {
                resolved.push(other);
                if exists {
                    match resolved.canonicalize() {
                        Ok(real) => resolved = real,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_not_made_yet_resolves_through_the_part_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("work")).unwrap();
        std::os::unix::fs::symlink(real.join("work"), real.join("link")).unwrap();
        assert_eq!(resolve(&real.join("link/runs/a")), real.join("work/runs/a"));
        assert_eq!(
            resolve(&real.join("link/new/../runs")),
            real.join("work/runs")
        );
        assert_eq!(resolve(&real.join("work")), real.join("work"));
    }
}
