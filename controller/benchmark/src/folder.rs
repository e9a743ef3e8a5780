//! A task folder: what kind it is (Harbor's, Terminal-Bench 1's), how it loads, and its
//! content hash as Harbor computes it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Context, TaskResult, bail};
use crate::{BenchTask, HostVars, harbor, tb1};

/// Loads the task in `dir` (kept as an absolute path), named `name`.
pub fn load(dir: &Path, name: &str, host: &HostVars) -> TaskResult<BenchTask> {
    let dir = &std::path::absolute(dir)
        .with_context(|| format!("{}: no absolute path", dir.display()))?;
    match detect(dir) {
        Some(Format::Harbor) => harbor::load(dir, name, host),
        Some(Format::TerminalBench1) => tb1::load(dir, name, host),
        None => bail!(
            "{}: neither a Harbor task (task.toml) nor a Terminal-Bench task (task.yaml and docker-compose.yaml)",
            dir.display()
        ),
    }
}

/// Harbor's content hash of a task (`TrialLock.task.digest`): per file, sorted by relative
/// path, `"{rel}\0{sha256(bytes)}\n"`, hashed; files are `task.toml`, `instruction.md`,
/// `README.md`, `trajectory.json` and everything under `environment/`, `tests/`, `solution/`
/// and `steps/`, less editor and bytecode leftovers. TB1 tasks hash every file.
pub fn digest(dir: &Path, format: Format) -> TaskResult<String> {
    let mut files = files_of(dir).with_context(|| format!("reading {}", dir.display()))?;
    files.retain(|(rel, _)| {
        let top = rel.split('/').next().unwrap_or_default();
        let kept = match format {
            Format::Harbor => {
                matches!(
                    top,
                    "task.toml" | "instruction.md" | "README.md" | "trajectory.json"
                ) || matches!(top, "environment" | "tests" | "solution" | "steps")
                    && rel.contains('/')
            }
            Format::TerminalBench1 => true,
        };
        let junk = rel
            .split('/')
            .any(|part| part == "__pycache__" || part == ".DS_Store")
            || [".pyc", ".swp", ".swo", "~"]
                .iter()
                .any(|suffix| rel.ends_with(suffix));
        kept && !junk
    });
    let mut hasher = Sha256::new();
    for (rel, path) in files {
        let file = file_digest(&path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(format!("{rel}\0{}\n", hex::encode(file)).as_bytes());
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// The SHA-256 of a file, read a piece at a time (a task's data file may be larger than
/// memory).
fn file_digest(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize().to_vec())
}

/// The regular files under `root` (links not followed), as (path relative to it, path),
/// sorted by the relative path.
pub(crate) fn files_of(root: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    collect_files(root, root, &mut files)?;
    files.sort();
    Ok(files)
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect_files(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push((rel.to_string_lossy().into_owned(), path));
        }
    }
    Ok(())
}

/// Seconds from a TOML or YAML number (integer or float), checked.
/// A task's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Harbor,
    #[serde(rename = "terminal-bench-1")]
    TerminalBench1,
}

sandbox_protocol::serde_names!(Format);

/// What kind of task a folder holds, if any.
pub fn detect(dir: &Path) -> Option<Format> {
    if dir.join("task.toml").is_file() {
        Some(Format::Harbor)
    } else if dir.join("task.yaml").is_file() && dir.join("docker-compose.yaml").is_file() {
        Some(Format::TerminalBench1)
    } else {
        None
    }
}

/// Benchmark task folders, as a dataset's discovery recognises them.
pub const TASK_FOLDERS: harness_runtime::task::TaskFolders = harness_runtime::task::TaskFolders {
    is_task: |dir| detect(dir).is_some(),
    described: "Harbor task.toml folders, Terminal-Bench task.yaml folders",
};
