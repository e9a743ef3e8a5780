//! The policy every tool call passes before it reaches a sandbox, as the seed's safety check:
//! rules first, read-only tools skip the classifier, then the LLM risk classifier for what the
//! rules leave open. The answer is allow, ask or deny, with a reason and where it came from.

pub mod classifier;
pub mod rules;

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

pub use classifier::Classifier;
pub use rules::{RuleSet, Verdict};

/// What to do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Ask a person; the reason is shown to them.
    Ask(String),
    /// Refuse; the reason reaches the model in the BLOCKED message.
    Deny(String),
}

/// A decision with its provenance, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub decision: Decision,
    /// `rule`, `read_only`, `classifier`, `classifier_failed`, `allow_all` or `no_classifier`.
    pub source: String,
    pub rule: Option<String>,
    pub risk: Option<f64>,
    pub authorized: Option<f64>,
    pub classifier_model: Option<String>,
}

impl Judgement {
    fn new(decision: Decision, source: &str) -> Judgement {
        Judgement {
            decision,
            source: source.to_owned(),
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
        "allow_all".to_owned()
    }

    fn decide<'a>(
        &'a self,
        _request: &'a str,
        _tool: &'a str,
        _args: &'a Value,
    ) -> BoxFuture<'a, Judgement> {
        Box::pin(async { Judgement::new(Decision::Allow, "allow_all") })
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
                let mut judgement = Judgement::new(decision, "rule");
                judgement.rule = Some(rule.pattern.clone());
                return judgement;
            }
            if READ_ONLY_TOOLS.contains(&tool) {
                return Judgement::new(Decision::Allow, "read_only");
            }
            let Some(classifier) = &self.classifier else {
                return Judgement::new(
                    Decision::Ask("no rule matched and no classifier is configured".to_owned()),
                    "no_classifier",
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

/// What happens to an `ask` decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Approve {
    /// Never approve: every ask is a no.
    Never,
    /// Ask the person at the terminal; without one, the answer is no (the default).
    Ask,
    /// Approve every ask without a person. Only for disposable, isolated sandboxes: the
    /// classifier and the rules' ask list then stop nothing.
    Auto,
}

/// The seed's prompt on a terminal; no terminal means no.
pub fn ask_user(tool: &str, args: &Value, reason: &str) -> bool {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return false;
    }
    let mut stderr = std::io::stderr();
    if write!(stderr, "\nAllow {tool} {args}? ({reason}) [y/N] ")
        .and_then(|()| stderr.flush())
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    match stdin.lock().read_line(&mut answer) {
        Ok(0) | Err(_) => false,
        Ok(_) => matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"),
    }
}

/// The message a refused call returns to the model, as the seed words it.
pub fn blocked_message(reason: &str) -> String {
    format!(
        "BLOCKED by the safety check ({reason}). Do not retry this; find another way or ask the user."
    )
}
