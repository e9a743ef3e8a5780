//! `harness run`'s words: `[WORKING_DIR] TASK…`, or with a task file at most a working
//! directory. The runtime gets a task and a folder; the command line stays here.

use std::path::{Path, PathBuf};

use harness_runtime::config::{RunConfig, SandboxTarget, SessionFlags};
use harness_runtime::task::TaskFile;

/// Where a session given only a task text works.
const DEFAULT_WORKING_DIR: &str = "agent-harness-working";

/// The config of `harness run WORDS…` (with `task_file`, of `harness run --task FILE [DIR]`).
pub(super) fn config(
    words: &[String],
    task_file: Option<&Path>,
    flags: &SessionFlags,
) -> anyhow::Result<RunConfig> {
    let task = task_file.map(TaskFile::load).transpose()?;
    let from_file = task.is_some();
    let (task, working_dir) = match task {
        Some(task) => {
            if words.len() > 1 {
                anyhow::bail!(
                    "with --task, give at most a working directory, not a task text ({} words given)",
                    words.len()
                );
            }
            (task, words.first().map(PathBuf::from))
        }
        None => match words {
            [] => anyhow::bail!(
                "usage: harness run [--web-search] [WORKING_DIR] \"TASK\" (or --task FILE)"
            ),
            [task] => (
                TaskFile::from_prompt(task),
                Some(PathBuf::from(DEFAULT_WORKING_DIR)),
            ),
            [dir, rest @ ..] => (TaskFile::from_prompt(&rest.join(" ")), Some(dir.into())),
        },
    };
    let brings_workspace = task.workspace.is_some();
    let config = RunConfig::new(task, working_dir, flags)?;
    // A local sandbox works in the named folder as it is, so it must exist (a task that brings
    // its workspace copies it there, so a new folder is fine); another sandbox has a workspace
    // of its own and does not use it.
    if let Some(dir) = words.first().filter(|_| words.len() > 1 || from_file)
        && config.sandbox == SandboxTarget::Local
        && !brings_workspace
    {
        existing_dir(dir, (!from_file).then_some(words))?;
    }
    Ok(config)
}

/// WORKING_DIR must be a folder that exists: a mistyped path is not made into an empty one,
/// and an unquoted task (`harness run add a flag`) is not read as the folder `add` and the
/// task "a flag". `words`: the whole command line's words, to say what was meant.
fn existing_dir(dir: &str, words: Option<&[String]>) -> anyhow::Result<()> {
    let path = Path::new(dir);
    if path.is_dir() {
        return Ok(());
    }
    let what = if path.exists() {
        "is not a folder"
    } else {
        "does not exist"
    };
    let mut message = format!("the working directory `{dir}` {what}");
    if path.exists() {
        message.push_str(": give a folder");
    } else if let Some(words) = words {
        let whole = words.join(" ");
        message.push_str(&format!(
            ". If \"{whole}\" is the task, quote it: harness run \"{whole}\" (it then runs in \
             ./{DEFAULT_WORKING_DIR}); to work in a new folder, create it first: mkdir -p {dir}"
        ));
    } else {
        message.push_str(&format!(
            " (the task file brings no workspace, so its agent works in that folder as it is): \
             create it first (mkdir -p {dir}), or give an existing one"
        ));
    }
    anyhow::bail!(message)
}
