//! The policy's contract: what every tool call is judged by before it reaches a sandbox, as the
//! seed's safety check. A [`Policy`] answers allow, ask or deny ([`Decision`]), with a reason and
//! where it came from ([`Judgement`]); an ask is settled by [`Approval`]. The rules, the shell
//! parser and the LLM risk classifier that make the policy a session uses are `harness-judge`'s;
//! a session receives them as a [`BuildPolicy`].
//!
//! # This crate (`harness-policy`)
//! Small on purpose: the runtime, the log toolkit and the benchmark adapter depend on it, so
//! what changes here rebuilds them all. It depends on `harness-log` (the verdict and decision
//! types the log records), `harness-models` (the model a classifier is built from, for
//! [`BuildPolicy`]) and `sandbox-protocol` (the typed call, [`ToolInput`]), never on the
//! runtime, a sandbox client, hooks or `harness-judge`: what a policy needs of the workspace it
//! asks through the [`Workspace`] trait, which the runtime's sandbox client implements. Its
//! failures are [`PolicyError`]; it does not use `anyhow`.

pub mod approval;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use approval::{Approval, Approve, Asker, Nobody, Settled};
pub use sandbox_protocol::{BuiltIn, ToolInput};

use harness_log::{DecisionSource, Verdict};
use harness_models::{Model, ModelSpec};

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
    /// A decision from `source`, with no rule, risk or model named yet.
    pub fn new(decision: Decision, source: DecisionSource) -> Judgement {
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
    /// A folder; its `config`'s text (empty when it has none), and the other configs git reads
    /// from there (`modules/*/config` of submodules, `worktrees/*/config.worktree`,
    /// `config.worktree`), each with its path.
    Folder {
        config: String,
        more: Vec<(String, String)>,
    },
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

    /// Where a workspace path (relative to its root) leads out of the workspace, when it or a
    /// symlink on its way does (an absolute path); `None` when it stays inside, or when the
    /// sandbox cannot say.
    fn leads_out<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Option<String>>;
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

/// How a session's tool calls are judged.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySettings {
    /// Rules added to (or, with `defaults: false`, replacing) the built-in ones.
    pub rules_file: Option<PathBuf>,
    /// Every call runs unchecked (`--policy allow-all`).
    pub allow_all: bool,
    /// The classifier's model; the run's model when absent.
    pub classifier_model: Option<String>,
    pub classifier_timeout: Duration,
    pub no_classifier: bool,
    pub approve: Approve,
}

/// Makes a session's policy from its settings: the run's model and its spec (a classifier
/// shares the model unless it names its own, whose requests then pass the gates too).
/// `harness_judge::build_policy` is the one the binary hands the runtime.
pub type BuildPolicy = fn(
    &PolicySettings,
    &ModelSpec,
    &Arc<dyn Model>,
    Option<&harness_models::gate::Gates>,
) -> Result<Box<dyn Policy>, PolicyError>;

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
    Classifier(#[from] harness_models::BuildError),
}

/// The message a refused call returns to the model, as the seed words it.
pub fn blocked_message(reason: &str) -> String {
    format!(
        "BLOCKED by the safety check ({reason}). Do not retry this; find another way or ask the user."
    )
}
