//! A task file on the scripted model, as the benches and the integration tests write one.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// `task` written as `dir/task.yaml` (JSON is YAML); its path.
pub(crate) fn write_task(dir: &Path, task: &Value) -> PathBuf {
    let path = dir.join("task.yaml");
    std::fs::write(&path, task.to_string()).unwrap();
    path
}

/// `script` (what the scripted model plays: its turns, verdicts, summary; YAML, or JSON as a
/// value) written as `dir/script.yaml`, and `task` as `dir/task.yaml` with that script for its
/// model; the task file's path.
pub(crate) fn scripted_task(dir: &Path, script: impl Display, mut task: Value) -> PathBuf {
    std::fs::write(dir.join("script.yaml"), script.to_string()).unwrap();
    task["model"] = json!({"name": "script:script.yaml"});
    write_task(dir, &task)
}
