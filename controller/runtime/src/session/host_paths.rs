//! The host folders a session writes to or runs programs from lie outside what its agent can
//! write. A local sandbox serves a folder of this host and lets commands write `--writable`
//! paths: a log folder inside one of them could have its `blobs/` swapped for a link by a
//! command, and the harness (not confined) would then write where the link points; a hooks
//! file's folder or an MCP server's working folder inside one would let a command change a
//! program the harness runs with its own environment.

use std::collections::VecDeque;
use std::ffi::OsString;
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
        let (resolved, links) = resolve(&path);
        let inside = |place: &Path| writable.iter().find(|(dir, _)| place.starts_with(dir));
        if let Some((_, folder)) = inside(&resolved) {
            return Err(InputError(format!(
                "{what} {} lies inside {folder}, which the agent's commands can write: a command could replace what the harness writes or runs there; give a folder outside it",
                path.display()
            )));
        }
        if let Some((link, (_, folder))) = links
            .iter()
            .find_map(|link| inside(link).map(|found| (link, found)))
        {
            return Err(InputError(format!(
                "{what} {} is reached through the link {}, which lies inside {folder}, which the agent's commands can write: a command could point it elsewhere; give a path without it",
                path.display(),
                link.display()
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
        writable.push((resolve(&dir).0, named));
    }
    for path in &config.writable {
        let named = format!("the --writable path {}", path.display());
        writable.push((resolve(path).0, named));
    }
    writable
}

/// Where `path` leads, resolved as the kernel would, link by link (`..` after a link is the
/// parent of where it leads; the part not made yet is added by name), and the place of every
/// link on the way: a link inside a folder the agent writes can be pointed elsewhere later,
/// so the path is only as safe as the folders its links lie in.
fn resolve(path: &Path) -> (PathBuf, Vec<PathBuf>) {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut pending: VecDeque<OsString> = parts(&absolute);
    let mut resolved = PathBuf::from("/");
    let mut links = Vec::new();
    let mut exists = true;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&part);
        let link = exists
            .then(|| std::fs::symlink_metadata(&next))
            .and_then(|meta| match meta {
                Ok(meta) => Some(meta.file_type().is_symlink()),
                Err(_) => None,
            });
        match link {
            Some(true) if links.len() < MAX_LINKS => {
                let target = std::fs::read_link(&next).unwrap_or_default();
                links.push(next);
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                for part in parts(&target).into_iter().rev() {
                    pending.push_front(part);
                }
            }
            Some(_) => resolved = next,
            None => {
                exists = false;
                resolved = next;
            }
        }
    }
    (resolved, links)
}

/// Links followed at the most (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// A path's names, `..` kept, `.` and the root left out.
fn parts(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|part| match part {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_resolves_link_by_link_and_names_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(real.join("work/sub")).unwrap();
        std::os::unix::fs::symlink(real.join("work"), real.join("link")).unwrap();
        std::os::unix::fs::symlink("../elsewhere", real.join("work/up")).unwrap();
        let (to, links) = resolve(&real.join("link/runs/a"));
        assert_eq!(to, real.join("work/runs/a"));
        assert_eq!(links, [real.join("link")]);
        let (to, _) = resolve(&real.join("link/new/../runs"));
        assert_eq!(
            to,
            real.join("work/runs"),
            "`..` of a folder not made yet, by name"
        );
        let (to, _) = resolve(&real.join("link/sub/../runs"));
        assert_eq!(to, real.join("work/runs"));
        let (to, links) = resolve(&real.join("link/up/x"));
        assert_eq!(
            to,
            real.join("elsewhere/x"),
            "a relative link, from its own folder"
        );
        assert_eq!(links, [real.join("link"), real.join("work/up")]);
        assert_eq!(resolve(&real.join("work")), (real.join("work"), Vec::new()));
    }
}
