//! The rules, the shell parser and the LLM risk classifier: the policy a session's tool calls
//! pass, as the seed's safety check. Rules first (over the parsed shell command, its paths and
//! what it would run), read-only tools skip the classifier, then the classifier for what the
//! rules leave open; [`build_policy`] puts them together from a run's settings.
//!
//! Under the rules: [`shell`] (tree-sitter-bash to simple commands), [`bash`] (what a line
//! runs: wrappers peeled, variables substituted, code handed to a shell followed; `danger` the
//! built-in denials and asks, `readonly` the option-aware allow entries, `git` the repository
//! check), [`paths`] (normalisation, credential reach of globs) and [`judged`] (what a call is
//! judged as: `exec` as its command, input typed into a shell as a command). A rule never allows
//! what it cannot fully parse, and built-in denials are checked before any allow.
//!
//! # This crate (`harness-judge`)
//! Implements `harness-policy`'s [`Policy`]. It depends on `harness-policy` (the contract),
//! `harness-log`, `harness-models` (the classifier's model) and `sandbox-protocol`, never on
//! the runtime, a sandbox client or hooks. Only the binary depends on it: the runtime receives
//! [`build_policy`] as a [`harness_policy::BuildPolicy`] and the log toolkit's rerun a built
//! [`Policy`], so a change to the rules rebuilds this crate and the binary, nothing between.
//! Its failures are [`PolicyError`]; it does not use `anyhow`.

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

pub use build::build_policy;
pub use classifier::Classifier;
pub use harness_policy::{
    AllowAll, BuiltIn, Call, Decision, GitDir, Judgement, Policy, PolicyError, PolicySettings,
    ProcessView, ToolInput, Workspace,
};
pub use judged::{Judged, What};
pub use rules::{RuleSet, Ruling};

use harness_log::{DecisionSource, Verdict};

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
                let ruling = match call.workspace {
                    Some(workspace)
                        if ruling.verdict == Verdict::Allow && !ruling.operands.is_empty() =>
                    {
                        link_check(ruling, workspace).await
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
            return Ruling::new(Verdict::Ask, format!("built-in: {why}"));
        }
    }
    ruling
}

/// An allowed command stays allowed only when none of the workspace paths it reads leads out
/// of the workspace through a symlink (`notes.txt -> ~/.ssh/id_rsa`): the sandbox says where
/// each leads; out to a credential is denied, out anywhere else is for a person.
async fn link_check(ruling: Ruling, workspace: &dyn Workspace) -> Ruling {
    for operand in &ruling.operands {
        let Some(target) = workspace.leads_out(operand).await else {
            continue;
        };
        let provenance = match paths::credential_path(&target)
            .or_else(|| paths::credential_ancestor(&target))
        {
            Some(place) => (
                Verdict::Deny,
                format!(
                    "built-in: reads a credential location ({place}) through a link: {operand} leads to {target}"
                ),
            ),
            None => (
                Verdict::Ask,
                format!(
                    "built-in: reads through a link out of the workspace: {operand} leads to {target}"
                ),
            ),
        };
        return Ruling::new(provenance.0, provenance.1);
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
            GitDir::Folder { config, more } => {
                // How deep each git folder lies below the workspace root, for the relative
                // `core.worktree` of a submodule.
                let depth = |path: &str| {
                    let base = if folder == "." {
                        0
                    } else {
                        folder.split('/').count()
                    };
                    base + 1 + path.split('/').count().saturating_sub(1)
                };
                if let Some(key) = bash::repo_config_runs_programs_at(&config, depth("config")) {
                    return Some(format!(
                        "the repository's config ({place}.git/config) has {key}, which could run a program or read outside the workspace"
                    ));
                }
                // A submodule's or a worktree's config is read by the same commands
                // (`git status` recurses into submodules).
                return more.iter().find_map(|(path, text)| {
                    bash::repo_config_runs_programs_at(text, depth(path)).map(|key| {
                        format!("{place}.git/{path} has {key}, which could run a program or read outside the workspace")
                    })
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
    /// Option-aware allow entries for `bash`: `program [sub] options…` (see `bash::readonly`).
    #[serde(default)]
    pub read_only: Vec<String>,
    /// Whether the built-in rules apply as well (after these); true when absent.
    #[serde(default)]
    pub defaults: Option<bool>,
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
