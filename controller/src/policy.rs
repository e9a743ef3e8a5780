//! The seam where every tool call is decided before it reaches a sandbox. Until the safety
//! issue brings rules and a classifier, the only policy allows everything.

use std::io::{BufRead, IsTerminal, Write};

use futures::future::BoxFuture;
use serde_json::Value;

/// What to do with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Ask a person; the reason is shown to them.
    Ask(String),
    /// Refuse; the reason reaches the model in the BLOCKED message.
    Deny(String),
}

/// Decides tool calls. `request` is the user's task (trusted); the call is untrusted.
pub trait Policy: Send + Sync {
    fn decide<'a>(
        &'a self,
        request: &'a str,
        tool: &'a str,
        args: &'a Value,
    ) -> BoxFuture<'a, Decision>;
}

/// Allows every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn decide<'a>(
        &'a self,
        _request: &'a str,
        _tool: &'a str,
        _args: &'a Value,
    ) -> BoxFuture<'a, Decision> {
        Box::pin(async { Decision::Allow })
    }
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
