//! The person at the terminal: progress on stderr as the seed prints it, and the seed's y/N
//! question when the policy asks about a call.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Mutex;

use futures::future::BoxFuture;
use harness_log::text::terminal_safe;
use harness_models::ToolCall;
use harness_policy::Asker;
use harness_runtime::run_loop::Observer;
use harness_runtime::sandbox::LiveOutput;
use sandbox_protocol::{OutputStream, ToolInput};

/// The most lines of one call's output shown live; the log has the rest.
const LIVE_LINES: usize = 500;
/// An unfinished line longer than this is shown as it is, so that output without newlines is
/// never gathered without bound.
const LONGEST_LINE: usize = 4096;

/// Prints each tool call as it starts, as the seed, and (when asked) a running command's
/// output under it, dimmed; asks at the terminal.
pub(crate) struct Terminal {
    live: bool,
    colour: bool,
    shown: Mutex<Shown>,
    /// Calls refused so far, for the run's last lines.
    refused: std::sync::atomic::AtomicUsize,
}

/// The running call's output so far: the unfinished line of each stream, lines printed.
#[derive(Default)]
struct Shown {
    partial: [String; 2],
    lines: usize,
}

impl Terminal {
    pub(crate) fn new(live: bool) -> Terminal {
        Terminal {
            live,
            colour: colour_on_stderr(),
            shown: Mutex::new(Shown::default()),
            refused: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many calls the policy refused.
    pub(crate) fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn print_line(&self, shown: &mut Shown, stderr: bool, line: &str) {
        shown.lines += 1;
        if shown.lines > LIVE_LINES {
            if shown.lines == LIVE_LINES + 1 {
                self.dim("    … more output: the log has all of it");
            }
            return;
        }
        let mark = if stderr { '!' } else { '|' };
        // A progress bar redraws its line after each `\r`: shown as a terminal would, its
        // last state.
        let line = line.trim_end_matches('\r');
        let line = line.rsplit('\r').next().unwrap_or(line);
        self.dim(&format!("    {mark} {line}"));
    }

    /// Prints `text` dimmed; its control characters (what a command or a model wrote) are
    /// shown, never sent to the terminal.
    fn dim(&self, text: &str) {
        let text = terminal_safe(text);
        if self.colour {
            eprintln!("\x1b[2m{text}\x1b[0m");
        } else {
            eprintln!("{text}");
        }
    }
}

impl Observer for Terminal {
    fn tool_call(&self, call: &ToolCall) {
        eprintln!("  > {}", terminal_safe(&call.name));
    }

    fn live_output(&self) -> bool {
        self.live
    }

    fn tool_output(&self, _call: &ToolCall, output: &LiveOutput) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        match output {
            LiveOutput::Output { stream, text } => {
                let stderr = *stream == OutputStream::Stderr;
                let partial = &mut shown.partial[usize::from(stderr)];
                partial.push_str(text);
                match partial.rfind('\n') {
                    Some(end) => {
                        let done: String = partial.drain(..=end).collect();
                        for line in done.lines() {
                            self.print_line(&mut shown, stderr, line);
                        }
                    }
                    None if partial.len() > LONGEST_LINE => {
                        let line = std::mem::take(partial);
                        self.print_line(&mut shown, stderr, &line);
                    }
                    None => {}
                }
            }
            LiveOutput::Dropped(bytes) => {
                self.dim(&format!("    … {bytes} bytes not shown: the log has them"));
            }
        }
    }

    fn tool_finished(&self, _call: &ToolCall) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        for stderr in [false, true] {
            let rest = std::mem::take(&mut shown.partial[usize::from(stderr)]);
            if !rest.is_empty() {
                self.print_line(&mut shown, stderr, &rest);
            }
        }
        *shown = Shown::default();
    }

    fn tool_refused(&self, _call: &ToolCall, reason: &str) {
        self.refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let line = format!("    refused: {}", terminal_safe(reason));
        if self.colour {
            eprintln!("\x1b[33m{line}\x1b[0m");
        } else {
            eprintln!("{line}");
        }
    }

    fn compacted(&self, before: usize, after: usize) {
        eprintln!("  (compacted the history: {before} messages -> {after})");
    }

    fn note(&self, text: &str) {
        eprintln!("{}", terminal_safe(text));
    }
}

impl Asker for Terminal {
    fn ask<'a>(&'a self, call: &'a ToolInput, reason: &'a str) -> BoxFuture<'a, Option<bool>> {
        let tool = call.name().to_owned();
        let (args, reason) = (
            serde_json::to_string(call).unwrap_or_default(),
            reason.to_owned(),
        );
        Box::pin(async move {
            tokio::task::spawn_blocking(move || ask_user(&tool, &args, &reason))
                .await
                .unwrap_or(Some(false))
        })
    }
}

/// The seed's prompt on a terminal; `None` without one.
fn ask_user(tool: &str, args: &str, reason: &str) -> Option<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let mut stderr = std::io::stderr();
    // The reason quotes the call (the model's words): its control characters could otherwise
    // redraw this very question.
    let question = format!("\nAllow {tool} {args}? ({reason}) [y/N] ");
    if write!(stderr, "{}", terminal_safe(&question))
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

/// Stdout for what a log says (its text is untrusted): control characters shown as `\u001b`,
/// not sent to the terminal ([`harness_log::text::terminal_safe`]). Flush it when done.
pub(crate) fn safe_stdout() -> harness_log::text::TerminalSafe<std::io::StdoutLock<'static>> {
    harness_log::text::TerminalSafe::new(std::io::stdout().lock())
}
