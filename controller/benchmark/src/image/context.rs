//! A task's build context: its files read (links kept as links, never followed out of it;
//! `.dockerignore` honoured) and packed into the tar the engine builds from.

use std::path::{Path, PathBuf};

use super::{CA_IN_CONTEXT, DOCKERFILE_IN_CONTEXT};
use crate::error::{Context, TaskResult, bail};

/// A file of a build context: path relative to it, mode, bytes (a link: [`LINK_MODE`] and its
/// target).
pub(super) type ContextFile = (String, u32, Vec<u8>);

/// The mode that marks a symbolic link among the context's files.
pub(super) const LINK_MODE: u32 = 0o120_777;

/// The most bytes a task's build context may hold: it is read into memory to be sent.
const CONTEXT_MAX_BYTES: u64 = 2 << 30;

/// The context's files, sorted; `.git` and what `.dockerignore` names (simple patterns) left out.
pub(super) fn context_files(context: &Path) -> TaskResult<Vec<ContextFile>> {
    let ignored = dockerignore(context);
    let mut walk = Walk {
        context,
        root: context
            .canonicalize()
            .with_context(|| format!("the build context {}", context.display()))?,
        files: Vec::new(),
        total: 0,
    };
    let mut stack: Vec<PathBuf> = vec![context.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let path = entry.path();
            let rel = path
                .strip_prefix(context)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if is_ignored(&rel, &ignored) {
                continue;
            }
            if let Some(folder) = walk.add(path, rel)? {
                stack.push(folder);
            }
        }
    }
    let mut files = walk.files;
    files.sort();
    Ok(files)
}

/// `.dockerignore`'s patterns, trimmed, without blank lines and comments; none when the
/// context has no such file.
fn dockerignore(context: &Path) -> Vec<String> {
    std::fs::read_to_string(context.join(".dockerignore"))
        .map(|text| {
            text.lines()
                .map(|l| {
                    l.trim()
                        .trim_start_matches("./")
                        .trim_end_matches('/')
                        .to_owned()
                })
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the context's path `rel` is left out: `.git`, or a `.dockerignore` pattern that
/// names it, a folder above it, or its last name.
fn is_ignored(rel: &str, ignored: &[String]) -> bool {
    rel == ".git"
        || ignored.iter().any(|pattern| {
            rel == *pattern || rel.starts_with(&format!("{pattern}/")) || glob_name(pattern, rel)
        })
}

/// The walk over a build context: the files kept so far and their bytes.
struct Walk<'a> {
    context: &'a Path,
    /// The context resolved: what its links must land inside.
    root: PathBuf,
    files: Vec<ContextFile>,
    total: u64,
}

impl Walk<'_> {
    /// Keeps the entry at `path` (`rel` in the context): a link as a link, a file with its
    /// mode and bytes. Returns a folder, for the walk to enter. Its own step: what is sent of
    /// each kind of entry, and what is refused, is decided here.
    fn add(&mut self, path: PathBuf, rel: String) -> TaskResult<Option<PathBuf>> {
        // A link is sent as a link, never followed: a task's context is its own files
        // (`leak -> ~/.ssh/id_rsa` or a link to `/` would read this machine's).
        let meta = std::fs::symlink_metadata(&path).context(path.display())?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).context(path.display())?;
            let lands = path.canonicalize().ok();
            if !lands.as_ref().is_some_and(|p| p.starts_with(&self.root)) {
                bail!(
                    "{}: a link to {}, outside the build context (a task may use only its own files)",
                    path.display(),
                    target.display()
                );
            }
            self.files.push((
                rel,
                LINK_MODE,
                target.as_os_str().as_encoded_bytes().to_vec(),
            ));
        } else if meta.is_dir() {
            return Ok(Some(path));
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt;
            self.total += meta.len();
            if self.total > CONTEXT_MAX_BYTES {
                bail!(
                    "the build context {} holds more than {} bytes",
                    self.context.display(),
                    CONTEXT_MAX_BYTES
                );
            }
            self.files.push((
                rel,
                meta.permissions().mode() & 0o7777,
                std::fs::read(&path).context(path.display())?,
            ));
        }
        Ok(None)
    }
}

/// `*.pyc`-style patterns against a path's last name.
fn glob_name(pattern: &str, rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    match pattern.strip_prefix('*') {
        Some(suffix) if !suffix.contains(['*', '/']) => name.ends_with(suffix),
        _ => false,
    }
}

/// The build's context as a tar: its files (links as links), the rewritten Dockerfile and
/// the CA bundle, if any.
pub(super) fn context_tar(
    files: &[ContextFile],
    dockerfile: &str,
    ca: Option<&[u8]>,
) -> std::io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut builder = tar::Builder::new(Vec::new());
    let add = |builder: &mut tar::Builder<Vec<u8>>,
               path: &str,
               mode: u32,
               bytes: &[u8]|
     -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        if mode == LINK_MODE {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            let target = Path::new(std::ffi::OsStr::from_bytes(bytes));
            return builder.append_link(&mut header, path, target);
        }
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        builder.append_data(&mut header, path, bytes)
    };
    for (rel, mode, bytes) in files {
        add(&mut builder, rel, *mode, bytes)?;
    }
    add(
        &mut builder,
        DOCKERFILE_IN_CONTEXT,
        0o644,
        dockerfile.as_bytes(),
    )?;
    if let Some(ca) = ca {
        add(&mut builder, CA_IN_CONTEXT, 0o644, ca)?;
    }
    builder.into_inner()
}
