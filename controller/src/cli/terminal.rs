//! The person at the terminal: progress on stderr as the seed prints it, and the seed's y/N
//! question when the policy asks about a call.

use std::io::{BufRead, IsTerminal, Write};

use controller::llm::ToolCall;
use controller::policy::Asker;
use controller::run_loop::Observer;
use futures::future::BoxFuture;
use serde_json::Value;

/// Prints each tool call as it starts, as the seed; asks at the terminal.
pub(crate) struct Terminal;

impl Observer for Terminal {
    fn tool_call(&self, call: &ToolCall) {
        eprintln!("  > {}", call.name);
    }

    fn compacted(&self, before: usize, after: usize) {
        eprintln!("  (compacted the history: {before} messages -> {after})");
    }

    fn note(&self, text: &str) {
        eprintln!("{text}");
    }
}

impl Asker for Terminal {
    fn ask<'a>(
        &'a self,
        tool: &'a str,
        args: &'a Value,
        reason: &'a str,
    ) -> BoxFuture<'a, Option<bool>> {
        let (tool, args, reason) = (tool.to_owned(), args.clone(), reason.to_owned());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask_user(&tool, &args, &reason))
                .await
                .unwrap_or(Some(false))
        })
    }
}

/// The seed's prompt on a terminal; `None` without one.
fn ask_user(tool: &str, args: &Value, reason: &str) -> Option<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let mut stderr = std::io::stderr();
    if write!(stderr, "\nAllow {tool} {args}? ({reason}) [y/N] ")
        .and_then(|()| stderr.flush())
        .is_err()
    {
        return Some(false);
    }
    let mut answer = String::new();
    match stdin.lock().read_line(&mut answer) {
        Ok(0) | Err(_) => Some(false),
        Ok(_) => Some(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes")),
    }
}

/// Colour only on a terminal, and never with `NO_COLOR` set (<https://no-color.org>): a log
/// redirected to a file or a pipe holds no escape codes.
pub(crate) fn colour_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
