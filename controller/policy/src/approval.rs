//! What happens to an `ask`: `--approve` says whether nobody approves, everything is approved,
//! or someone is asked; an [`Asker`] is that someone. The library never talks to a terminal:
//! the binary implements the asker that does.

use futures::future::BoxFuture;
use sandbox_protocol::ToolInput;

use super::{Decision, Judgement};
use harness_log::SettledBy;

/// What happens to an `ask` decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approve {
    /// Never approve: every ask is a no.
    Never,
    /// Ask the person at the terminal; without one, the answer is no (the default).
    Ask,
    /// Approve every ask without a person. Only for disposable, isolated sandboxes: the
    /// classifier and the rules' ask list then stop nothing.
    Auto,
}

impl Approve {
    /// Who settles asks, in words for the session's policy line.
    pub fn describe(self) -> &'static str {
        match self {
            Approve::Ask => "the person at the terminal (none means no)",
            Approve::Never => "nobody (--approve never: every ask is a no)",
            Approve::Auto => "automatic approval (--approve auto)",
        }
    }
}

/// Someone who can answer an ask about one tool call.
pub trait Asker: Send + Sync {
    /// `Some(yes)` when someone answered; `None` when nobody is there to ask.
    fn ask<'a>(&'a self, call: &'a ToolInput, reason: &'a str) -> BoxFuture<'a, Option<bool>>;
}

/// Nobody to ask (a batch, a test): every ask finds no one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nobody;

impl Asker for Nobody {
    fn ask<'a>(&'a self, _call: &'a ToolInput, _reason: &'a str) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async { None })
    }
}

/// How asks are settled in a session.
#[derive(Clone, Copy)]
pub struct Approval<'a> {
    pub mode: Approve,
    pub asker: &'a dyn Asker,
}

/// A judgement's final word: whether the call runs, who settled an ask, and the reason the
/// model reads when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub allowed: bool,
    pub settled_by: Option<SettledBy>,
    pub reason: String,
}

impl Approval<'_> {
    /// Settles `judgement` for a call of `tool` with `args`.
    pub async fn settle(&self, judgement: &Judgement, call: &ToolInput) -> Settled {
        let reason = judgement.decision.reason().to_owned();
        let (allowed, settled_by) = match (&judgement.decision, self.mode) {
            (Decision::Allow, _) => (true, None),
            (Decision::Deny(_), _) => (false, None),
            (Decision::Ask(_), Approve::Never) => (false, Some(SettledBy::ApproveNever)),
            (Decision::Ask(_), Approve::Auto) => (true, Some(SettledBy::ApproveAuto)),
            (Decision::Ask(why), Approve::Ask) => match self.asker.ask(call, why).await {
                Some(yes) => (yes, Some(SettledBy::Person)),
                None => (false, Some(SettledBy::NoTerminal)),
            },
        };
        let reason = match settled_by {
            Some(SettledBy::NoTerminal) => format!("{reason}; no one at a terminal to approve it"),
            Some(SettledBy::ApproveNever) => format!("{reason}; --approve never"),
            Some(SettledBy::Person) if !allowed => format!("{reason}; the user said no"),
            Some(SettledBy::Person | SettledBy::ApproveAuto) | None => reason,
        };
        Settled {
            allowed,
            settled_by,
            reason,
        }
    }
}

sandbox_protocol::serde_names!(Approve);
