//! Where a path leads, its links followed as the file tools follow them, told rather than
//! refused: the policy asks this before it lets a command read a workspace path, so that
//! `cat notes.txt` is judged as what `notes.txt` links to (`~/.ssh/id_rsa`), as `read_file`
//! already is.

use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::readlinkat;
use nix::sys::stat::SFlag;
use sandbox_protocol::EntryKind;

use super::{Walk, Workspace, WorkspaceError, file_type, io_error};

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    /// What is there, once the links are followed (`None`: nothing, or not reached).
    pub kind: Option<EntryKind>,
    /// Where a link on the way (or the path itself) leads out of the boundary: an absolute
    /// path, `..` resolved by name.
    pub leads_to: Option<String>,
}

impl Workspace {
    /// Follows `path` component by component from the root, as [`Workspace::resolve`] does,
    /// and says where it leads; leaving the boundary is an answer, not an error.
    pub fn trace(&self, path: &str) -> Result<Traced, WorkspaceError> {
        let mut walk = match Walk::start(self, path) {
            Ok(walk) => walk,
            Err(WorkspaceError::OutsideWorkspace { .. }) => {
                return Ok(out(normalize(&self.root.join(path))));
            }
            Err(err) => return Err(err),
        };
        // The path walked so far, by name, from `/`: where an escape leads.
        let mut place = self.start_of(path);
        while let Some((component, is_last)) = walk.next_component() {
            if component == ".." {
                place.pop();
                if walk.up().is_err() {
                    return Ok(out(rest(place, &walk)));
                }
                continue;
            }
            match walk.stat(&component) {
                Ok(stat) if file_type(&stat) == SFlag::S_IFLNK => {
                    let target = readlinkat(walk.top(), component.as_os_str())
                        .map_err(|errno| io_error(path, errno))?;
                    let target = PathBuf::from(target);
                    if walk.follow(self, &component).is_err() {
                        let joined = if target.is_absolute() {
                            target
                        } else {
                            place.join(target)
                        };
                        return Ok(out(rest(normalize(&joined), &walk)));
                    }
                    if target.is_absolute() {
                        place = PathBuf::from("/");
                    }
                }
                Ok(stat) if is_last => {
                    return Ok(Traced {
                        kind: Some(kind_of(file_type(&stat))),
                        leads_to: None,
                    });
                }
                Ok(stat) if file_type(&stat) != SFlag::S_IFDIR => return Ok(nothing()),
                Ok(_) => {
                    walk.descend(&component)?;
                    place.push(&component);
                }
                Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(nothing()),
                Err(errno) => return Err(io_error(path, errno)),
            }
        }
        Ok(Traced {
            kind: Some(EntryKind::Dir),
            leads_to: None,
        })
    }

    /// Where a walk of `path` starts, by name.
    fn start_of(&self, path: &str) -> PathBuf {
        match &self.anywhere {
            Some(_) if Path::new(path).is_absolute() => PathBuf::from("/"),
            _ if Path::new(path).is_absolute() => PathBuf::from("/"),
            _ => self.root.clone(),
        }
    }
}

fn out(place: impl AsRef<Path>) -> Traced {
    Traced {
        kind: None,
        leads_to: Some(place.as_ref().display().to_string()),
    }
}

fn nothing() -> Traced {
    Traced {
        kind: None,
        leads_to: None,
    }
}

/// `place` with the components the walk has not taken yet.
fn rest(mut place: PathBuf, walk: &Walk<'_>) -> PathBuf {
    for component in &walk.queue {
        place.push(component);
    }
    normalize(&place)
}

/// `..` and `.` resolved by name.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn kind_of(kind: SFlag) -> EntryKind {
    match kind {
        SFlag::S_IFREG => EntryKind::File,
        SFlag::S_IFDIR => EntryKind::Dir,
        SFlag::S_IFLNK => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_out_of_the_workspace_is_told_where_it_leads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("docs")).expect("mkdir");
        std::fs::write(root.join("a.txt"), "a").expect("write");
        std::os::unix::fs::symlink("/etc/ssh", root.join("docs/keys")).expect("link");
        std::os::unix::fs::symlink("../../outside/id", root.join("docs/up")).expect("link");
        std::os::unix::fs::symlink("a.txt", root.join("inside")).expect("link");
        let workspace = Workspace::open(&root).expect("workspace");
        let traced = |path: &str| workspace.trace(path).expect("trace");
        assert_eq!(traced("inside").kind, Some(EntryKind::File));
        assert_eq!(traced("inside").leads_to, None);
        assert_eq!(
            traced("docs/keys/host_key").leads_to.as_deref(),
            Some("/etc/ssh/host_key")
        );
        let up = traced("docs/up").leads_to.expect("out");
        assert!(up.ends_with("/outside/id"), "{up}");
        assert!(!up.contains(".."), "{up}");
        assert_eq!(traced("missing/x"), nothing());
        assert!(traced("../elsewhere").leads_to.is_some());
    }
}
