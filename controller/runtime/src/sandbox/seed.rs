//! Seeding a workspace through the sandbox API (`PUT /v1/files`), so a local folder, a tar
//! archive or a git commit reaches a local and a remote sandbox the same way.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, bail};

use super::SandboxClient;
use crate::task::WorkspaceSource;

/// What was copied in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seeded {
    pub n_files: u64,
    pub n_bytes: u64,
    /// Entries that could not be copied (symlinks, special files), with why.
    pub skipped: Vec<String>,
}

pub async fn seed(sandbox: &SandboxClient, source: &WorkspaceSource) -> anyhow::Result<Seeded> {
    match source {
        WorkspaceSource::Dir(dir) => upload_dir(sandbox, dir).await,
        WorkspaceSource::Archive(file) => upload_archive(sandbox, file).await,
        WorkspaceSource::Git { repo, commit } => {
            let checkout = tempfile::tempdir().context("creating a folder for the git checkout")?;
            git(
                &[
                    "clone",
                    "--quiet",
                    "--no-checkout",
                    repo,
                    &checkout.path().display().to_string(),
                ],
                None,
            )
            .await?;
            git(
                &["checkout", "--quiet", "--detach", commit],
                Some(checkout.path()),
            )
            .await
            .with_context(|| format!("checking out {commit} of {repo}"))?;
            upload_dir(sandbox, checkout.path()).await
        }
    }
}

async fn git(args: &[&str], cwd: Option<&Path>) -> anyhow::Result<()> {
    #[allow(clippy::disallowed_methods)]
    // git, for a task's workspace; no other process is spawned here
    let mut command = tokio::process::Command::new("git");
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let output = command
        .output()
        .await
        .context("running git (is it installed?)")?;
    if !output.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

async fn upload_dir(sandbox: &SandboxClient, root: &Path) -> anyhow::Result<Seeded> {
    if !root.is_dir() {
        bail!("workspace.dir {}: not a folder", root.display());
    }
    let mut seeded = Seeded::default();
    let mut stack: Vec<PathBuf> = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", dir.display()))?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .expect("walked below the root")
                .to_string_lossy()
                .into_owned();
            let kind = entry
                .file_type()
                .with_context(|| format!("reading {}", path.display()))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let mode = entry
                    .metadata()
                    .map(|m| m.permissions().mode() & 0o7777)
                    .ok();
                seeded.n_bytes += bytes.len() as u64;
                seeded.n_files += 1;
                sandbox
                    .put_file(&relative, bytes, mode)
                    .await
                    .with_context(|| format!("copying {relative} into the sandbox"))?;
            } else {
                seeded.skipped.push(format!(
                    "{relative}: not a regular file or folder (symlinks are not copied)"
                ));
            }
        }
    }
    Ok(seeded)
}

/// A regular file from an archive: its path, content and mode.
type ArchiveFile = (String, Vec<u8>, u32);

async fn upload_archive(sandbox: &SandboxClient, file: &Path) -> anyhow::Result<Seeded> {
    let bytes = std::fs::read(file)
        .with_context(|| format!("reading workspace.archive {}", file.display()))?;
    // Unpack in memory on a blocking thread, then upload; gzip is recognised by its magic bytes.
    let name = file.display().to_string();
    let entries =
        tokio::task::spawn_blocking(move || -> anyhow::Result<(Vec<ArchiveFile>, Vec<String>)> {
            let reader: Box<dyn Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
                Box::new(flate2::read::GzDecoder::new(&bytes[..]))
            } else {
                Box::new(&bytes[..])
            };
            let mut archive = tar::Archive::new(reader);
            let mut files = Vec::new();
            let mut skipped = Vec::new();
            for entry in archive
                .entries()
                .with_context(|| format!("{name}: not a tar archive"))?
            {
                let mut entry = entry.with_context(|| format!("{name}: a broken tar entry"))?;
                let path = entry
                    .path()
                    .with_context(|| format!("{name}: an entry with a bad path"))?
                    .to_string_lossy()
                    .into_owned();
                match entry.header().entry_type() {
                    tar::EntryType::Regular | tar::EntryType::Continuous => {
                        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
                        let mut content = Vec::new();
                        entry
                            .read_to_end(&mut content)
                            .with_context(|| format!("{name}: reading {path}"))?;
                        files.push((path, content, mode));
                    }
                    tar::EntryType::Directory => {}
                    other => skipped.push(format!("{path}: {other:?} entries are not copied")),
                }
            }
            Ok((files, skipped))
        })
        .await
        .context("unpacking the archive")??;
    let (files, skipped) = entries;
    let mut seeded = Seeded {
        skipped,
        ..Seeded::default()
    };
    for (path, content, mode) in files {
        seeded.n_files += 1;
        seeded.n_bytes += content.len() as u64;
        sandbox
            .put_file(&path, content, Some(mode))
            .await
            .with_context(|| format!("copying {path} into the sandbox"))?;
    }
    Ok(seeded)
}
