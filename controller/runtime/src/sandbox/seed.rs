//! Seeding a workspace through the sandbox API (`PUT /v1/files`, or one streamed
//! `PUT /v1/workspace/archive` for a tree that replaces it), so a local folder, a tar archive
//! or a git commit reaches a local and a remote sandbox the same way.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::SandboxClient;
use crate::step::{Step, StepError};
use crate::task::WorkspaceSource;

/// What was copied in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seeded {
    pub n_files: u64,
    pub n_bytes: u64,
    /// Entries that could not be copied (symlinks, special files), with why.
    pub skipped: Vec<String>,
}

pub async fn seed(sandbox: &SandboxClient, source: &WorkspaceSource) -> Result<Seeded, StepError> {
    match source {
        WorkspaceSource::Dir(dir) => upload_dir(sandbox, dir).await,
        WorkspaceSource::Archive(file) => upload_archive(sandbox, file).await,
        WorkspaceSource::Replace(file) => {
            // The guard where it acts: a container whose workspace is its root (a task image
            // without WORKDIR) would lose its system folders, whatever a log said beforehand.
            let info = sandbox
                .info()
                .await
                .step("asking the sandbox for its workspace root")?;
            if Path::new(&info.workspace_root) == Path::new("/") {
                return Err(StepError::harness(format!(
                    "the sandbox's workspace is its root (/): {} cannot replace it",
                    file.display()
                )));
            }
            let opened = tokio::fs::File::open(file)
                .await
                .map_err(|err| local(&format!("opening {}", file.display()), &err))?;
            let put = sandbox
                .put_archive_file(opened)
                .await
                .step_with(|| format!("replacing the workspace with {}", file.display()))?;
            Ok(Seeded {
                n_files: put.n_files,
                n_bytes: put.n_bytes,
                skipped: Vec::new(),
            })
        }
        WorkspaceSource::Git {
            repo,
            commit,
            untrusted,
        } => {
            let checkout = tempfile::tempdir()
                .map_err(|err| local("creating a folder for the git checkout", &err))?;
            clone_repo(repo, commit, checkout.path(), *untrusted).await?;
            upload_dir(sandbox, checkout.path()).await
        }
    }
}

/// `repo` cloned into `into` and checked out at `commit`. Neither may start with `-` (git
/// would read it as an option; the repository also comes after `--`).
async fn clone_repo(
    repo: &str,
    commit: &str,
    into: &Path,
    untrusted: bool,
) -> Result<(), StepError> {
    if let Some(value) = [repo, commit].into_iter().find(|v| v.starts_with('-')) {
        return Err(StepError::harness(format!(
            "workspace.git: `{value}` starts with `-`, which git would read as an option"
        )));
    }
    let into_text = into.display().to_string();
    let args = [
        "clone",
        "--quiet",
        "--no-checkout",
        "--",
        repo,
        into_text.as_str(),
    ];
    git(&args, None, untrusted).await?;
    git(
        &["checkout", "--quiet", "--detach", commit],
        Some(into),
        untrusted,
    )
    .await
    .step_with(|| format!("checking out {commit} of {repo}"))
}

/// What an untrusted clone (a dataset's task's) runs with, before its subcommand: no
/// credential helper, askpass program, SSH or extra HTTP header of this machine's, and https
/// as its only protocol.
const UNTRUSTED_CONFIG: &[&str] = &[
    "-c",
    "credential.helper=",
    "-c",
    "core.askPass=",
    "-c",
    "core.sshCommand=false",
    "-c",
    "http.extraHeader=",
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.https.allow=always",
];

/// `git` with `args` in `cwd`. It never prompts: nobody is there to answer. When `untrusted`
/// (a dataset's task, someone else's), it also reads none of this machine's git config (an
/// `insteadOf` could put a token in the URL, a helper answer for a private repository) and
/// runs with [`UNTRUSTED_CONFIG`].
async fn git(args: &[&str], cwd: Option<&Path>, untrusted: bool) -> Result<(), StepError> {
    #[allow(clippy::disallowed_methods)]
    // git, for a task's workspace; no other process is spawned here
    let mut command = tokio::process::Command::new("git");
    // An empty home: no `~/.netrc` (which curl reads for git's https), no `~/.gitconfig`.
    let home = match untrusted {
        true => {
            Some(tempfile::tempdir().map_err(|err| local("making an empty home for git", &err))?)
        }
        false => None,
    };
    if let Some(home) = &home {
        command
            .args(UNTRUSTED_CONFIG)
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ALLOW_PROTOCOL", "https")
            .env("GIT_SSH_COMMAND", "false")
            .env("NETRC", "/dev/null");
        // Configuration and places passed down in the environment are this machine's too.
        for (name, _) in std::env::vars_os() {
            let text = name.to_string_lossy();
            let passed = text.starts_with("GIT_CONFIG_")
                || matches!(
                    text.as_ref(),
                    "GIT_DIR" | "GIT_WORK_TREE" | "GIT_ASKPASS" | "SSH_ASKPASS" | "GIT_COMMON_DIR"
                );
            if passed && text != "GIT_CONFIG_NOSYSTEM" && text != "GIT_CONFIG_GLOBAL" {
                command.env_remove(&name);
            }
        }
    }
    command
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let output = command
        .output()
        .await
        .map_err(|err| local("running git (is it installed?)", &err))?;
    if !output.status.success() {
        return Err(StepError::harness(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

async fn upload_dir(sandbox: &SandboxClient, root: &Path) -> Result<Seeded, StepError> {
    if !root.is_dir() {
        return Err(StepError::harness(format!(
            "workspace.dir {}: not a folder",
            root.display()
        )));
    }
    let mut seeded = Seeded::default();
    let mut stack: Vec<PathBuf> = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let reading = |err: std::io::Error| local(&format!("reading {}", dir.display()), &err);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(reading)?
            .collect::<Result<_, _>>()
            .map_err(reading)?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .expect("walked below the root")
                .to_string_lossy()
                .into_owned();
            let reading = |err: std::io::Error| local(&format!("reading {}", path.display()), &err);
            let kind = entry.file_type().map_err(reading)?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).map_err(reading)?;
                let mode = entry
                    .metadata()
                    .map(|m| m.permissions().mode() & 0o7777)
                    .ok();
                seeded.n_bytes += bytes.len() as u64;
                seeded.n_files += 1;
                sandbox
                    .put_file(&relative, bytes, mode)
                    .await
                    .step_with(|| format!("copying {relative} into the sandbox"))?;
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

async fn upload_archive(sandbox: &SandboxClient, file: &Path) -> Result<Seeded, StepError> {
    let bytes = std::fs::read(file).map_err(|err| {
        local(
            &format!("reading workspace.archive {}", file.display()),
            &err,
        )
    })?;
    // Unpack in memory on a blocking thread, then upload; gzip is recognised by its magic bytes.
    let name = file.display().to_string();
    let entries = tokio::task::spawn_blocking(
        move || -> Result<(Vec<ArchiveFile>, Vec<String>), StepError> {
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
                .map_err(|err| local(&format!("{name}: not a tar archive"), &err))?
            {
                let mut entry =
                    entry.map_err(|err| local(&format!("{name}: a broken tar entry"), &err))?;
                let path = entry
                    .path()
                    .map_err(|err| local(&format!("{name}: an entry with a bad path"), &err))?
                    .to_string_lossy()
                    .into_owned();
                match entry.header().entry_type() {
                    tar::EntryType::Regular | tar::EntryType::Continuous => {
                        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
                        let mut content = Vec::new();
                        entry
                            .read_to_end(&mut content)
                            .map_err(|err| local(&format!("{name}: reading {path}"), &err))?;
                        files.push((path, content, mode));
                    }
                    tar::EntryType::Directory => {}
                    other => skipped.push(format!("{path}: {other:?} entries are not copied")),
                }
            }
            Ok((files, skipped))
        },
    )
    .await
    .map_err(|err| StepError::harness(format!("unpacking the archive: {err}")))??;
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
            .step_with(|| format!("copying {path} into the sandbox"))?;
    }
    Ok(seeded)
}

/// A local file or program that failed the harness while `doing` something.
fn local(doing: &str, err: &std::io::Error) -> StepError {
    StepError::harness(format!("{doing}: {err}"))
}
