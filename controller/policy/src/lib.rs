//! The policy every tool call passes before it reaches a sandbox, as the seed's safety check:
//! rules first, read-only tools skip the classifier, then the LLM risk classifier for what the
//! rules leave open. The answer is allow, ask or deny, with a reason and where it came from.
//!
//! # This crate (`harness-policy`)
//! Decides tool calls. It depends on `harness-log` (the verdict and decision types the log
//! records), `harness-models` (the classifier's model) and `sandbox-protocol` (the typed call,
//! [`ToolInput`]), never on the runtime, a sandbox client or hooks: what it needs of the
//! workspace it asks through the [`Workspace`] trait, which the runtime's sandbox client
//! implements. Its failures are [`PolicyError`]; it does not use `anyhow`.

pub mod approval;
pub mod bash;
mod build;
pub mod classifier;
pub mod judged;
pub mod paths;
pub mod rules;
pub mod shell;

use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;

pub use approval::{Approval, Approve, Asker, Nobody, Settled};
pub use build::{PolicySettings, build_policy};
pub use classifier::Classifier;
pub use judged::{Judged, What};
pub use rules::{RuleSet, Ruling};
pub use sandbox_protocol::{BuiltIn, ToolInput};

use event_log::{DecisionSource, Verdict};

/// What to do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Ask a person; the reason is shown to them.
    Ask(String),
    /// Refuse; the reason reaches the model in the BLOCKED message.
    Deny(String),
}

impl Decision {
    /// The verdict, as the log files it.
    pub fn verdict(&self) -> Verdict {
        match self {
            Decision::Allow => Verdict::Allow,
            Decision::Ask(_) => Verdict::Ask,
            Decision::Deny(_) => Verdict::Deny,
        }
    }

    /// Why, when it is not an allow.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow => "",
            Decision::Ask(reason) | Decision::Deny(reason) => reason,
        }
    }
}

/// A decision with its provenance, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub decision: Decision,
    pub source: DecisionSource,
    pub rule: Option<String>,
    pub risk: Option<f64>,
    pub authorized: Option<f64>,
    pub classifier_model: Option<String>,
    /// The session cannot go on: the classifier's model is a script that has no answer for
    /// this call (an operator's mistake to fix, not a risk to weigh). The call is refused
    /// and the session stops with this message.
    pub fatal: Option<String>,
}

impl Judgement {
    fn new(decision: Decision, source: DecisionSource) -> Judgement {
        Judgement {
            decision,
            source,
            rule: None,
            risk: None,
            authorized: None,
            classifier_model: None,
            fatal: None,
        }
    }
}

/// A tool call to judge.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    /// The user's task (trusted).
    pub request: &'a str,
    /// The call (untrusted), parsed.
    pub input: &'a ToolInput,
    /// The workspace the call would run in, for checks that look at it; `None` when there is
    /// none (`harness policy eval`).
    pub workspace: Option<&'a dyn Workspace>,
}

/// Decides tool calls.
pub trait Policy: Send + Sync {
    fn name(&self) -> String;
    fn decide<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Judgement>;
}

/// The workspace's `.git`, as the check of a read-only git command needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitDir {
    /// No `.git` in the folder, and the folder is no repository of its own.
    Missing,
    /// `.git` is a file (`gitdir: …` points elsewhere).
    File,
    /// A folder; its `config`'s text (empty when it has none).
    Folder(String),
    /// The folder itself is a bare repository (`HEAD`, `objects/` or `refs/`, as git finds
    /// one); its `config`'s text.
    Bare(String),
    /// The repository's config is elsewhere (`commondir`): what points there.
    Redirected(String),
    /// It could not be read.
    Unreadable(String),
}

/// What the policy may look at in a sandbox.
pub trait Workspace: Send + Sync {
    /// `FOLDER/.git`, for a folder relative to the workspace root (`.` for the root).
    fn git_dir<'a>(&'a self, folder: &'a str) -> BoxFuture<'a, GitDir>;

    /// A process started by id (`exec`, the `shell` tool's shell), when there is one.
    fn process<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<ProcessView>>;
}

/// What the policy knows of a process started by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessView {
    pub cmd: String,
    /// Its folder, as the sandbox says it: relative to the workspace root when inside it,
    /// absolute otherwise; `None` when it did not say (it ended, or an older sandbox).
    pub cwd: Option<String>,
}

/// Allows every call (`--policy allow-all`, for trusted, isolated experiments).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn name(&self) -> String {
        DecisionSource::AllowAll.as_str().to_owned()
    }

    fn decide<'a>(&'a self, _call: Call<'a>) -> BoxFuture<'a, Judgement> {
        Box::pin(async { Judgement::new(Decision::Allow, DecisionSource::AllowAll) })
    }
}

/// Rules, then the read-only shortcut, then the classifier (when there is one).
pub struct Pipeline {
    pub rules: RuleSet,
    pub classifier: Option<Classifier>,
    pub description: String,
}

impl Policy for Pipeline {
    fn name(&self) -> String {
        self.description.clone()
    }

    fn decide<'a>(&'a self, call: Call<'a>) -> BoxFuture<'a, Judgement> {
        Box::pin(async move {
            let judged = judged::judged_as(&call).await;
            if judged.what == What::Waiting {
                return Judgement::new(Decision::Allow, DecisionSource::ReadOnly);
            }
            if let Some(ruling) = self.rules.evaluate(&judged) {
                let ruling = match call.workspace {
                    Some(workspace) if !ruling.repositories.is_empty() => {
                        repository_check(ruling, workspace).await
                    }
                    _ => ruling,
                };
                let reason = ruling.provenance.clone();
                let decision = match ruling.verdict {
                    Verdict::Deny => Decision::Deny(reason),
                    Verdict::Ask => Decision::Ask(reason),
                    Verdict::Allow => Decision::Allow,
                };
                let mut judgement = Judgement::new(decision, DecisionSource::Rule);
                judgement.rule = Some(ruling.provenance);
                return judgement;
            }
            // A tool that only reads skips the classifier, as in the seed.
            if let What::File {
                tool: BuiltIn::ReadFile,
                ..
            } = judged.what
            {
                return Judgement::new(Decision::Allow, DecisionSource::ReadOnly);
            }
            let Some(classifier) = &self.classifier else {
                return Judgement::new(
                    Decision::Ask("no rule matched and no classifier is configured".to_owned()),
                    DecisionSource::NoClassifier,
                );
            };
            classifier
                .judge(call.request, &judged.tool, &judged.args)
                .await
        })
    }
}

/// A read-only git command stays allowed only when the repository it would use (the first
/// `.git` from its folder up to the workspace root) has a config that runs nothing.
async fn repository_check(ruling: Ruling, workspace: &dyn Workspace) -> Ruling {
    for folder in &ruling.repositories {
        if let Some(why) = repository_runs_programs(workspace, folder).await {
            return Ruling {
                verdict: Verdict::Ask,
                provenance: format!("built-in: {why}"),
                repositories: Vec::new(),
            };
        }
    }
    ruling
}

/// Why the repository git finds from `folder` could run a program, if it could.
async fn repository_runs_programs(workspace: &dyn Workspace, folder: &str) -> Option<String> {
    let mut folder = folder.to_owned();
    loop {
        let place = if folder == "." {
            String::new()
        } else {
            format!("{folder}/")
        };
        match workspace.git_dir(&folder).await {
            GitDir::Folder(config) => {
                return bash::repo_config_runs_programs(&config).map(|key| {
                    format!("the repository's config ({place}.git/config) has {key}, which could run a program")
                });
            }
            GitDir::File => return Some(format!("{place}.git is a file pointing elsewhere")),
            GitDir::Bare(config) => {
                return bash::repo_config_runs_programs(&config).map(|key| {
                    format!("the bare repository {folder} (git uses it from there) has {key} in its config, which could run a program")
                });
            }
            GitDir::Redirected(what) => {
                return Some(format!("{what} points git at a config elsewhere"));
            }
            GitDir::Unreadable(err) => {
                return Some(format!("the repository's config could not be read ({err})"));
            }
            GitDir::Missing if folder == "." => {
                return Some(
                    "no .git in the workspace: git would use a repository in a folder above it"
                        .to_owned(),
                );
            }
            GitDir::Missing => {
                folder = match folder.rsplit_once('/') {
                    Some((parent, _)) => parent.to_owned(),
                    None => ".".to_owned(),
                };
            }
        }
    }
}

/// `--policy FILE`: rules added to (or replacing) the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    /// Option-aware allow entries for `bash`: `program [sub] options…` (see `policy::bash::readonly`).
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Whether the built-in rules apply as well (after these); true when absent.
    #[serde(default)]
    pub defaults: Option<bool>,
}

/// Why a run's policy could not be built: its rules file, or the classifier's model.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("reading --policy {}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Not a policy file, or a rule or read-only entry in it that does not parse.
    #[error("{}: {message}", path.display())]
    File {
        path: std::path::PathBuf,
        message: String,
    },
    #[error(transparent)]
    Classifier(#[from] llm::BuildError),
}

/// The rules of a run: a policy file's, then the built-in ones unless it turns them off.
pub fn load_rules(file: Option<&Path>) -> Result<RuleSet, PolicyError> {
    let Some(path) = file else {
        return Ok(RuleSet::defaults());
    };
    let bad = |message: String| PolicyError::File {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
        path: path.to_owned(),
        source,
    })?;
    let parsed: PolicyFile = serde_norway::from_str(&text).map_err(|err| bad(err.to_string()))?;
    let mut rules = RuleSet::parse(&parsed.deny, &parsed.ask, &parsed.allow)
        .and_then(|rules| rules.with_read_only(&parsed.read_only))
        .map_err(bad)?;
    if parsed.defaults.unwrap_or(true) {
        rules.extend(RuleSet::defaults());
    }
    Ok(rules)
}

/// The message a refused call returns to the model, as the seed words it.
pub fn blocked_message(reason: &str) -> String {
    format!(
        "BLOCKED by the safety check ({reason}). Do not retry this; find another way or ask the user."
    )
}
