//! Finding the tasks of a dataset: our YAML task files and folders that are tasks of their
//! own (which the caller recognises: [`TaskFolders`]), found recursively and mixed freely.
//!
//! A task's name is its folder's name (a task folder; a YAML file named `task.yaml`) or its
//! file's name without the extension; names that clash become their path relative to the
//! folder given. In a folder walk a YAML file is a task only if it is a mapping with a
//! `prompt` (so the scripts, compose files and configs beside tasks are not taken for tasks);
//! a file named on the command line always is.

use crate::input::{InputError, invalid};
use std::path::{Path, PathBuf};

/// What a task is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskSource {
    /// One of our YAML task files.
    File(PathBuf),
    /// A folder that is a task of its own (one the binary's adapters read).
    Folder(PathBuf),
}

impl TaskSource {
    pub fn path(&self) -> &Path {
        match self {
            TaskSource::File(path) | TaskSource::Folder(path) => path,
        }
    }
}

/// A task found, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundTask {
    pub name: String,
    pub source: TaskSource,
}

/// What a walk found, before naming.
struct Candidate {
    source: TaskSource,
    /// The name when it does not clash.
    short: String,
    /// The path relative to the folder given (without a YAML file's extension).
    relative: String,
}

/// What makes a folder a task of its own, as the caller's adapters read them; the runtime
/// knows none.
#[derive(Clone, Copy)]
pub struct TaskFolders {
    /// Whether a folder is such a task.
    pub is_task: fn(&Path) -> bool,
    /// What such folders are, for a message that no task was found.
    pub described: &'static str,
}

impl TaskFolders {
    /// No folder is a task of its own: only task files.
    pub const NONE: TaskFolders = TaskFolders {
        is_task: |_| false,
        described: "",
    };
}

/// The tasks of `paths` (files or folders), in order; names are unique.
pub fn discover(paths: &[PathBuf], folders: TaskFolders) -> Result<Vec<FoundTask>, InputError> {
    let mut found: Vec<Candidate> = Vec::new();
    for path in paths {
        let before = found.len();
        if path.is_file() {
            found.push(file_candidate(
                path,
                path.parent().unwrap_or(Path::new(".")),
            ));
        } else if path.is_dir() {
            if (folders.is_task)(path) {
                found.push(folder_candidate(
                    path,
                    path.parent().unwrap_or(Path::new(".")),
                ));
            } else {
                walk(path, path, folders, &mut found)?;
            }
        } else {
            invalid!("{}: no such task file or folder", path.display());
        }
        if found.len() == before {
            let folders = if folders.described.is_empty() {
                String::new()
            } else {
                format!(", {}", folders.described)
            };
            invalid!(
                "{} holds no tasks (YAML task files with a prompt{folders})",
                path.display()
            );
        }
    }
    name(&found)
}

fn walk(
    root: &Path,
    dir: &Path,
    folders: TaskFolders,
    found: &mut Vec<Candidate>,
) -> Result<(), InputError> {
    let reading = |err| InputError(format!("reading the task folder {}: {err}", dir.display()));
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(reading)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, std::io::Error>>()
        .map_err(reading)?;
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        // Hidden names are skipped (a mounted ConfigMap keeps its bookkeeping in `..data`).
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            if (folders.is_task)(&path) {
                found.push(folder_candidate(&path, root));
            } else {
                walk(root, &path, folders, found)?;
            }
        } else if (name.ends_with(".yaml") || name.ends_with(".yml")) && has_prompt(&path) {
            found.push(file_candidate(&path, root));
        }
    }
    Ok(())
}

/// Whether a YAML file is a mapping with a `prompt` key.
fn has_prompt(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    matches!(
        serde_norway::from_str::<serde_norway::Value>(&text),
        Ok(serde_norway::Value::Mapping(map)) if map.contains_key("prompt")
    )
}

fn relative(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn file_candidate(path: &Path, root: &Path) -> Candidate {
    let stem = super::task_id(path);
    let short = match (stem.as_str(), path.parent().and_then(Path::file_name)) {
        ("task", Some(folder)) => folder.to_string_lossy().into_owned(),
        _ => stem,
    };
    let relative = relative(&path.with_extension(""), root);
    Candidate {
        source: TaskSource::File(path.to_owned()),
        short,
        relative,
    }
}

fn folder_candidate(dir: &Path, root: &Path) -> Candidate {
    let short = dir
        .file_name()
        .map_or_else(|| "task".to_owned(), |n| n.to_string_lossy().into_owned());
    Candidate {
        source: TaskSource::Folder(dir.to_owned()),
        relative: relative(dir, root),
        short,
    }
}

/// Short names, or relative paths where short names clash; an error where those clash too.
fn name(found: &[Candidate]) -> Result<Vec<FoundTask>, InputError> {
    let clashes = |short: &str| found.iter().filter(|c| c.short == short).count() > 1;
    let tasks: Vec<FoundTask> = found
        .iter()
        .map(|c| FoundTask {
            name: if clashes(&c.short) {
                c.relative.clone()
            } else {
                c.short.clone()
            },
            source: c.source.clone(),
        })
        .collect();
    for (i, task) in tasks.iter().enumerate() {
        if let Some(other) = tasks[..i].iter().find(|t| t.name == task.name) {
            invalid!(
                "two tasks are named `{}` ({} and {}): task names name their log folders, so they must differ",
                task.name,
                other.source.path().display(),
                task.source.path().display()
            );
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datasets_mix_formats_and_clashing_names_become_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |rel: &str, text: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("a/hello/task.toml", "");
        write("b/hello/task.yaml", "instruction: x\n");
        write("b/hello/docker-compose.yaml", "services: {}\n");
        write("mine/fix.yaml", "prompt: fix it\n");
        write("mine/script.yaml", "turns: []\n");
        write("mine/greet/task.yaml", "prompt: greet\n");
        write(".hidden/x.yaml", "prompt: no\n");
        // The caller's folders: here, any with a `task.toml`, or a `task.yaml` beside a compose
        // file.
        let folders = TaskFolders {
            is_task: |dir| {
                dir.join("task.toml").is_file()
                    || (dir.join("task.yaml").is_file()
                        && dir.join("docker-compose.yaml").is_file())
            },
            described: "task folders",
        };
        let tasks = discover(&[root.to_owned()], folders).unwrap();
        let names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a/hello", "b/hello", "fix", "greet"]);
        assert!(matches!(tasks[0].source, TaskSource::Folder(_)));
        assert!(matches!(tasks[2].source, TaskSource::File(_)));
        // A file named on the command line is a task whatever it holds.
        let named = discover(&[root.join("mine/script.yaml")], folders).unwrap();
        assert_eq!(named[0].name, "script");
        let err = discover(
            &[root.join("mine/fix.yaml"), root.join("mine/fix.yaml")],
            folders,
        )
        .unwrap_err();
        assert!(err.to_string().contains("two tasks are named"), "{err}");
        let empty = tempfile::tempdir().unwrap();
        let err = discover(&[empty.path().to_owned()], folders).unwrap_err();
        assert!(err.to_string().contains("holds no tasks"), "{err}");
        assert!(err.to_string().contains(", task folders)"), "{err}");
    }
}
