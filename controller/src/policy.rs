//! The policy every tool call passes before it reaches a sandbox, as the seed's safety check:
//! rules first, read-only tools skip the classifier, then the LLM risk classifier for what the
//! rules leave open. The answer is allow, ask or deny, with a reason and where it came from.

pub mod approval;
mod build;
pub mod classifier;
pub mod rules;

use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

pub use approval::{Approval, Approve, Asker, Nobody, Settled};
pub use build::{PolicySettings, build_policy};
pub use classifier::Classifier;
pub use rules::RuleSet;

use crate::event_log::{DecisionSource, Verdict};

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
        }
    }
}

/// Decides tool calls. `request` is the user's task (trusted); the call is untrusted.
pub trait Policy: Send + Sync {
    fn name(&self) -> String;
    fn decide<'a>(
        &'a self,
        request: &'a str,
        tool: &'a str,
        args: &'a Value,
    ) -> BoxFuture<'a, Judgement>;
}

/// Allows every call (`--policy allow-all`, for trusted, isolated experiments).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn name(&self) -> String {
        DecisionSource::AllowAll.as_str().to_owned()
    }

    fn decide<'a>(
        &'a self,
        _request: &'a str,
        _tool: &'a str,
        _args: &'a Value,
    ) -> BoxFuture<'a, Judgement> {
        Box::pin(async { Judgement::new(Decision::Allow, DecisionSource::AllowAll) })
    }
}

/// Tools that only read: they skip the classifier, as in the seed.
pub const READ_ONLY_TOOLS: &[&str] = &["read_file"];

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

    fn decide<'a>(
        &'a self,
        request: &'a str,
        tool: &'a str,
        args: &'a Value,
    ) -> BoxFuture<'a, Judgement> {
        Box::pin(async move {
            if let Some((verdict, rule)) = self.rules.evaluate(tool, args) {
                let reason = format!("rule {}", rule.pattern);
                let decision = match verdict {
                    Verdict::Deny => Decision::Deny(reason),
                    Verdict::Ask => Decision::Ask(reason),
                    Verdict::Allow => Decision::Allow,
                };
                let mut judgement = Judgement::new(decision, DecisionSource::Rule);
                judgement.rule = Some(rule.pattern.clone());
                return judgement;
            }
            if READ_ONLY_TOOLS.contains(&tool) {
                return Judgement::new(Decision::Allow, DecisionSource::ReadOnly);
            }
            let Some(classifier) = &self.classifier else {
                return Judgement::new(
                    Decision::Ask("no rule matched and no classifier is configured".to_owned()),
                    DecisionSource::NoClassifier,
                );
            };
            classifier.judge(request, tool, args).await
        })
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
    /// Whether the built-in rules apply as well (after these); true when absent.
    #[serde(default)]
    pub defaults: Option<bool>,
}

/// The rules of a run: a policy file's, then the built-in ones unless it turns them off.
pub fn load_rules(file: Option<&Path>) -> anyhow::Result<RuleSet> {
    let Some(path) = file else {
        return Ok(RuleSet::defaults());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|err| anyhow::anyhow!("reading --policy {}: {err}", path.display()))?;
    let parsed: PolicyFile = serde_norway::from_str(&text)
        .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    let mut rules = RuleSet::parse(&parsed.deny, &parsed.ask, &parsed.allow)
        .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
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
