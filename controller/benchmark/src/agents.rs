//! The agents a benchmark task can run besides a model, each played as a model so that its
//! session renders, measures, exports and reruns like any other.
//!
//! `--agent nop` answers at once and calls nothing: the verifier judges the task as built.
//!
//! `--agent oracle`: the task's solution script, played as a model that makes one `bash` call
//! and then answers with how the script ended. The call goes through the policy, the sandbox
//! and the log exactly as a model's would, so an oracle session renders, measures, exports
//! and reruns like any other.
//!
//! The command is Harbor's: `DEBIAN_FRONTEND=noninteractive` and `[solution.env]`, the script
//! made executable and run from the task's working folder, its output also in
//! `/logs/agent/oracle.txt`. A Terminal-Bench 1 script runs with `bash`, as TB1 ran it.

use sandbox_protocol::{BashArgs, ToolInput, ToolSpec};
use serde_json::json;

use super::{BenchTask, Format};
use harness_models::offline::{self, Offline};
use harness_models::{
    Ask, AssistantMessage, Message, ModelError, ModelReply, Request, ToolCall, Usage,
};

/// The bash tool's longest timeout on a default server.
const MAX_CALL_SECS: u64 = 3600;

/// The oracle of one task.
#[derive(Debug, Clone)]
pub struct OracleModel {
    command: String,
    timeout: u64,
}

impl OracleModel {
    /// The oracle of `task`; `None` when it has no solution.
    pub fn new(task: &BenchTask) -> Option<OracleModel> {
        let solution = task.solution.as_ref()?;
        let mut lines = vec![
            "set -o pipefail".to_owned(),
            "export DEBIAN_FRONTEND=noninteractive".to_owned(),
        ];
        for (key, value) in &solution.env {
            lines.push(format!("export {key}={}", quote(value)));
        }
        let script = quote(&solution.script);
        lines.push("mkdir -p /logs/agent".to_owned());
        lines.push(match task.format {
            Format::Harbor => {
                format!("{{ test -x {script} || chmod +x {script}; }} && {script} 2>&1 | tee /logs/agent/oracle.txt")
            }
            Format::TerminalBench1 => format!("bash {script} 2>&1 | tee /logs/agent/oracle.txt"),
        });
        Some(OracleModel {
            command: lines.join("\n"),
            // The longest a round may take: a step's may be longer than the task's.
            timeout: task
                .steps
                .iter()
                .map(|s| s.agent_timeout)
                .chain([task.agent_timeout])
                .max()
                .unwrap_or(task.agent_timeout)
                .as_secs()
                .clamp(1, MAX_CALL_SECS),
        })
    }

    /// The one call it makes.
    pub fn call(&self) -> ToolCall {
        let input = ToolInput::Bash(BashArgs {
            cmd: self.command.clone(),
            timeout: Some(u32::try_from(self.timeout).unwrap_or(u32::MAX)),
        });
        ToolCall {
            id: "oracle_1".to_owned(),
            name: input.name().to_owned(),
            arguments: serde_json::to_string(&input).unwrap_or_default(),
        }
    }
}

/// `--agent nop`: one reply, no tool call.
#[derive(Debug, Clone, Copy, Default)]
pub struct NopModel;

impl Offline for NopModel {
    const SOURCE: &'static str = "nop";

    fn describe(&self) -> String {
        "nop (does nothing; no language model)".to_owned()
    }

    fn answer(&self, _: &Ask) -> Result<ModelReply, ModelError> {
        Ok(ModelReply::free_text(
            "The nop agent does nothing.".to_owned(),
            json!({"nop": true}),
        ))
    }
}

/// A shell word for `text`.
pub(crate) fn quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@%".contains(c))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Offline for OracleModel {
    const SOURCE: &'static str = "oracle";

    fn describe(&self) -> String {
        "oracle (the task's own solution script, run through the bash tool; no language model)"
            .to_owned()
    }

    /// What the oracle "receives" (and the log records): the number of tool results so far
    /// and the last one.
    fn request(&self, messages: &[Message], tools: &[ToolSpec]) -> Request {
        let mut request = offline::request(Self::SOURCE, messages, tools);
        let results: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        request.body["n_tool_results"] = json!(results.len());
        request.body["last_result"] = json!(results.last().copied().unwrap_or_default());
        request
    }

    fn answer(&self, ask: &Ask) -> Result<ModelReply, ModelError> {
        let last = match ask {
            Ask::Structured { .. } => {
                return Err(ModelError::Script(
                    "the oracle is not a classifier: run it with --no-classifier".to_owned(),
                ));
            }
            // Its conversation is two turns; a compaction has nothing to keep.
            Ask::Summary => {
                return Ok(ModelReply::free_text(
                    "The oracle keeps no summary.".to_owned(),
                    json!({"oracle": true, "summary": true}),
                ));
            }
            Ask::Turn {
                last_tool_result, ..
            } => last_tool_result.as_deref(),
        };
        let done = last.is_some();
        let message = if let Some(last) = last {
            AssistantMessage {
                content: format!("The solution script ran.\n\n{}", tail(last, 2000)),
                ..AssistantMessage::default()
            }
        } else {
            AssistantMessage {
                content: "Running the task's solution script.".to_owned(),
                tool_calls: vec![self.call()],
                provider_items: None,
            }
        };
        Ok(ModelReply {
            message,
            usage: Usage::default(),
            cost: Some(0.0),
            raw: json!({"oracle": true, "done": done}),
        })
    }
}

/// The last `max` bytes of `text`, at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_for_the_shell() {
        assert_eq!(quote("/solution/solve.sh"), "/solution/solve.sh");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
