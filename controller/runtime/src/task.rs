//! Task files (seed 004 §4.3): the prompt, where the workspace comes from, setup and check
//! commands, the model, limits, sandbox and tools. Unknown keys and wrong types are errors
//! naming the key and the file.

mod discover;

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::input::{InputError, invalid};
pub use discover::{FoundTask, TaskFolders, TaskSource, discover};

/// A task file as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    /// What the agent is asked to do.
    pub prompt: String,
    /// Where the workspace comes from; the working directory as it is when absent.
    #[serde(default)]
    pub workspace: Option<WorkspaceSection>,
    /// Commands run in the sandbox, in order, before the agent starts; any failure stops the run.
    #[serde(default)]
    pub setup: Vec<String>,
    /// A command run after the agent finishes: exit 0 is a pass.
    #[serde(default)]
    pub check: Option<String>,
    /// Seconds the check may take; 600 when absent.
    #[serde(default)]
    pub check_timeout: Option<u32>,
    #[serde(default)]
    pub model: Option<ModelSection>,
    #[serde(default)]
    pub limits: Option<LimitsSection>,
    #[serde(default)]
    pub sandbox: Option<SandboxSection>,
    /// The tools the agent gets, in the server's order; all the sandbox offers when absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// A local sandbox's network: `none` (default) or `host` (to download data or packages).
    #[serde(default)]
    pub network: Option<String>,
    /// Adds the provider's built-in web search (OpenAI Responses only).
    #[serde(default)]
    pub web_search: Option<bool>,
    /// A hooks file (relative to this file), as `--hooks`; the flag wins.
    #[serde(default)]
    pub hooks: Option<PathBuf>,
    /// An MCP servers file (relative to this file), as `--mcp`; the flag wins.
    #[serde(default)]
    pub mcp: Option<PathBuf>,
    /// Also the servers of the workspace's own `.mcp.json`, as `--mcp-workspace`.
    #[serde(default)]
    pub mcp_workspace: Option<bool>,
    /// The `agent` tool's limits (with `agent` in `tools:`), as `--agent-*`; the flags win.
    #[serde(default)]
    pub agents: Option<crate::subagent::AgentsSection>,
}

impl TaskFile {
    /// The keys of this file (at `file`, found in the dataset folder `dataset`) that act on
    /// the harness's machine rather than in the sandbox, each with what it would do.
    pub fn host_side_keys(&self, file: &Path, dataset: &Path) -> Vec<String> {
        let folder = file.parent().unwrap_or(Path::new("."));
        let outside = |path: &Path| {
            let path = folder.join(path);
            let inside = match (path.canonicalize(), dataset.canonicalize()) {
                (Ok(path), Ok(root)) => path.starts_with(root),
                _ => false,
            };
            !inside
        };
        let mut keys = Vec::new();
        if let Some(model) = &self.model {
            if model.base_url.is_some() {
                keys.push("model.base_url: the model's requests, with this machine's API key, would go to the server it names".to_owned());
            }
            if let Some(script) = model.name.strip_prefix("script:")
                && outside(Path::new(script))
            {
                keys.push(format!("model.name: the script `{script}` is a file of this machine outside the dataset"));
            }
        }
        if self.hooks.is_some() {
            keys.push("hooks: programs that would run on this machine".to_owned());
        }
        if self.mcp.is_some() {
            keys.push(
                "mcp: servers that would run on (or be reached from) this machine".to_owned(),
            );
        }
        if self.mcp_workspace == Some(true) {
            keys.push(
                "mcp_workspace: the workspace's own MCP servers, reached from this machine"
                    .to_owned(),
            );
        }
        if let Some(sandbox) = &self.sandbox {
            if sandbox.url.is_some() {
                keys.push("sandbox.url: a sandbox this machine's harness would drive".to_owned());
            }
            if sandbox.token_file.is_some() {
                keys.push(
                    "sandbox.token_file: a file of this machine, sent to the sandbox".to_owned(),
                );
            }
        }
        if let Some(workspace) = &self.workspace {
            for (key, path) in [
                ("workspace.dir", &workspace.dir),
                ("workspace.archive", &workspace.archive),
            ] {
                if let Some(path) = path
                    && outside(path)
                {
                    // A path that does not exist cannot be placed; say so rather than guess.
                    let what = match path.exists() {
                        true => "copies files of this machine outside the dataset into the sandbox",
                        false => "does not exist, so it cannot be shown to lie inside the dataset",
                    };
                    keys.push(format!("{key}: `{}` {what}", path.display()));
                }
            }
            if let Some(git) = &workspace.git
                && let Err(why) = dataset_repo(&git.repo)
            {
                keys.push(format!("workspace.git.repo: `{}` {why}", git.repo));
            }
        }
        if self.network.as_deref() == Some("host") {
            keys.push(
                "network: host: the sandbox's commands would reach the network from this machine"
                    .to_owned(),
            );
        }
        keys
    }
}

/// Why a task of a dataset may not clone `repo`, if it may not. Only a public `https://` URL
/// without credentials is someone else's to name: a local path, `file://`, `ssh://` or
/// `git@host:` would clone this machine's repositories or with its keys, and a URL's `user@`
/// carries a credential. (The clone itself runs with none of this machine's git settings or
/// credentials: `sandbox::seed`.)
fn dataset_repo(repo: &str) -> Result<(), &'static str> {
    let Some(rest) = repo.strip_prefix("https://") else {
        return Err(
            "is not an https:// URL: a dataset's task may clone only a public https:// repository (a local path, file://, ssh:// or git@host: would reach this machine's repositories or keys; a repository inside the dataset too, whose git files may point outside it: give its files as `workspace.dir` or `workspace.archive` instead)",
        );
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("names no host");
    }
    if authority.contains('@') {
        return Err(
            "carries credentials (`user@`): a dataset's task may clone only a public https:// repository",
        );
    }
    Ok(())
}

/// `workspace:` as written: exactly one of `dir`, `archive` or `git`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSection {
    #[serde(default)]
    pub dir: Option<PathBuf>,
    #[serde(default)]
    pub archive: Option<PathBuf>,
    #[serde(default)]
    pub git: Option<GitSource>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitSource {
    pub repo: String,
    pub commit: String,
}

/// Where the workspace's files come from. Paths are relative to the task file.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkspaceSource {
    /// A local folder, copied in.
    Dir(PathBuf),
    /// A tar archive (`.tar`, `.tar.gz`, `.tgz`), unpacked in.
    Archive(PathBuf),
    /// A git repository, cloned and checked out at a commit, `.git` included. `untrusted`: a
    /// task of a dataset the operator did not vouch for, cloned with none of this machine's git
    /// settings or credentials, over https only.
    Git {
        repo: String,
        commit: String,
        untrusted: bool,
    },
    /// A tar archive the harness made (a fork's workspace at its step) that *replaces* the
    /// sandbox's workspace as it is: symlinks, modes and empty folders kept, the files already
    /// there (a task image's own) gone. Never named by a task file.
    Replace(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `openai/NAME`, `openai-compat/NAME`, `anthropic/NAME` or `script:FILE`.
    pub name: String,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub price: Option<PriceSection>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub thinking_budget: Option<u32>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSection {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    #[serde(default)]
    pub max_turns: Option<u32>,
    #[serde(default)]
    pub max_cost: Option<f64>,
    #[serde(default)]
    pub compact_at: Option<usize>,
}

/// Where the session's sandbox runs: `local` (default), `docker`, or `remote` (a running
/// server at `url`, implied by `url`). The flags override each key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// `docker`: the image.
    #[serde(default)]
    pub image: Option<String>,
    /// `docker`: memory, e.g. `2g` (no swap beyond it).
    #[serde(default)]
    pub memory: Option<String>,
    /// `docker`: CPUs, e.g. `1.5`.
    #[serde(default)]
    pub cpus: Option<f64>,
    /// `docker`: the most processes and threads.
    #[serde(default)]
    pub pids: Option<i64>,
    /// The longest the session may run, e.g. `30m`.
    #[serde(default)]
    pub lifetime: Option<String>,
}

impl WorkspaceSection {
    /// The one source this section names.
    pub fn source(&self) -> Result<WorkspaceSource, String> {
        match (&self.dir, &self.archive, &self.git) {
            (Some(dir), None, None) => Ok(WorkspaceSource::Dir(dir.clone())),
            (None, Some(file), None) => Ok(WorkspaceSource::Archive(file.clone())),
            (None, None, Some(git)) => Ok(WorkspaceSource::Git {
                repo: git.repo.clone(),
                commit: git.commit.clone(),
                untrusted: false,
            }),
            (None, None, None) => {
                Err("workspace: give one of `dir`, `archive` or `git`".to_owned())
            }
            _ => Err("workspace: give only one of `dir`, `archive` or `git`".to_owned()),
        }
    }
}

impl WorkspaceSource {
    /// The same source for a task of a dataset the operator did not vouch for (no
    /// `--trust-tasks`): a git repository is then cloned with none of this machine's git
    /// settings or credentials.
    pub fn untrusted(self) -> WorkspaceSource {
        match self {
            WorkspaceSource::Git { repo, commit, .. } => WorkspaceSource::Git {
                repo,
                commit,
                untrusted: true,
            },
            other => other,
        }
    }
}

impl TaskFile {
    /// A task that is only its prompt (`harness run "TASK"`).
    pub fn from_prompt(prompt: &str) -> TaskFile {
        TaskFile {
            prompt: prompt.to_owned(),
            workspace: None,
            setup: Vec::new(),
            check: None,
            check_timeout: None,
            model: None,
            limits: None,
            sandbox: None,
            tools: None,
            network: None,
            web_search: None,
            hooks: None,
            mcp: None,
            mcp_workspace: None,
            agents: None,
        }
    }

    /// The workspace source, checked.
    pub fn workspace_source(&self) -> Result<Option<WorkspaceSource>, String> {
        self.workspace
            .as_ref()
            .map(WorkspaceSection::source)
            .transpose()
    }

    /// Reads and checks a task file; relative paths become relative to its folder.
    pub fn load(path: &Path) -> Result<TaskFile, InputError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            InputError(format!("reading the task file {}: {err}", path.display()))
        })?;
        let mut task: TaskFile = serde_norway::from_str(&text)
            .map_err(|err| InputError(format!("{}: {err}", path.display())))?;
        if task.prompt.trim().is_empty() {
            invalid!("{}: prompt: must not be empty", path.display());
        }
        // Absolute, so that a relative path already rebased here is never joined to the
        // file's folder a second time (a dataset named by a relative path).
        let parent = path.parent().unwrap_or(Path::new("."));
        let base = std::path::absolute(parent).unwrap_or_else(|_| parent.to_owned());
        let base = base.as_path();
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        task.workspace_source()
            .map_err(|why| InputError(format!("{}: {why}", path.display())))?;
        if let Some(section) = &task.sandbox
            && let Some(provider) = &section.provider
            && !["local", "docker", "remote"].contains(&provider.as_str())
        {
            invalid!(
                "{}: sandbox.provider: expected `local`, `docker` or `remote`, got `{provider}`",
                path.display()
            );
        }
        if let Some(hooks) = &mut task.hooks {
            rebase(hooks);
        }
        if let Some(mcp) = &mut task.mcp {
            rebase(mcp);
        }
        if let Some(section) = &mut task.workspace {
            section.rebase(base, path)?;
        }
        if let Some(model) = &mut task.model
            && let Some(script) = model.name.strip_prefix("script:")
            && Path::new(script).is_relative()
        {
            model.name = format!("script:{}", base.join(script).display());
        }
        if let Some(SandboxSection {
            token_file: Some(file),
            ..
        }) = &mut task.sandbox
        {
            rebase(file);
        }
        Ok(task)
    }
}

impl WorkspaceSection {
    /// Its paths made relative to the task file's folder `base` and checked, before any
    /// sandbox starts: a folder or an archive that is not there is named with the path it was
    /// looked for at. `file`: the task file, for the messages.
    fn rebase(&mut self, base: &Path, file: &Path) -> Result<(), InputError> {
        if let Some(dir) = &mut self.dir {
            *dir = existing(base, dir, "workspace.dir", Path::is_dir, "a folder")
                .map_err(|why| InputError(format!("{}: {why}", file.display())))?;
        }
        if let Some(archive) = &mut self.archive {
            *archive = existing(base, archive, "workspace.archive", Path::is_file, "a file")
                .map_err(|why| InputError(format!("{}: {why}", file.display())))?;
        }
        if let Some(git) = &mut self.git {
            // Whoever wrote it, git would read either as an option.
            for (key, value) in [("repo", &git.repo), ("commit", &git.commit)] {
                if value.starts_with('-') {
                    invalid!(
                        "{}: workspace.git.{key}: `{value}` starts with `-`, which git would read as an option",
                        file.display()
                    );
                }
            }
            let local = base.join(&git.repo);
            if !git.repo.contains("://") && !git.repo.contains('@') && local.exists() {
                git.repo = local.display().to_string();
            }
        }
        Ok(())
    }
}

/// `written` (the value of `key`) joined to `base` when relative, if it is `what` (`is`);
/// otherwise why not, with the path looked at and, for a near miss, the name meant.
fn existing(
    base: &Path,
    written: &Path,
    key: &str,
    is: fn(&Path) -> bool,
    what: &str,
) -> Result<PathBuf, String> {
    let path = base.join(written);
    if is(&path) {
        return Ok(path);
    }
    let state = if path.exists() {
        format!("is not {what}")
    } else {
        "does not exist".to_owned()
    };
    let mut why = format!(
        "{key}: `{}` {state} (looked for at {}, relative to the task file)",
        written.display(),
        path.display()
    );
    if let Some(near) = near_miss(&path, is) {
        why.push_str(&format!("; did you mean `{near}`?"));
    }
    Err(why)
}

/// A sibling of `path` that is also `is` and whose name is at most two edits from its name.
fn near_miss(path: &Path, is: fn(&Path) -> bool) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let siblings = std::fs::read_dir(path.parent()?).ok()?;
    siblings
        .flatten()
        .take(1_000)
        .filter(|entry| is(&entry.path()))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .map(|sibling| (edits(&name, &sibling), sibling))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, sibling)| sibling)
}

/// The Levenshtein distance between `a` and `b`, by characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A task's name: its file name without the extension (`fix-bug.yaml` is `fix-bug`).
pub fn task_id(path: &Path) -> String {
    path.file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".to_owned())
}

/// `--task DIR --task-index N`: the N-th task of a dataset folder, as `harness batch DIR`
/// finds and names them (the log folder of a Kubernetes Indexed Job's pod is its name).
pub fn pick_indexed(
    dir: &Path,
    index: Option<usize>,
    folders: TaskFolders,
) -> Result<FoundTask, InputError> {
    let Some(index) = index else {
        invalid!(
            "--task {} is a folder: give --task-index N (or JOB_COMPLETION_INDEX) to pick a task",
            dir.display()
        );
    };
    let tasks = discover(&[dir.to_owned()], folders)?;
    let count = tasks.len();
    tasks.into_iter().nth(index).ok_or_else(|| {
        InputError(format!(
            "--task-index {index}: {} holds {count} tasks (indexes 0 to {})",
            dir.display(),
            count.saturating_sub(1)
        ))
    })
}

#[cfg(test)]
mod tests;
