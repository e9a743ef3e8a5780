//! `script:FILE`: a scripted model for tests and the quick start. It plays a file of turns in
//! order and ignores what it is sent; no language model is involved.
//!
//! ```yaml
//! turns:
//!   - text: "I'll look first."
//!     tool_calls:
//!       - name: read_file
//!         arguments: {path: greet.sh}     # an object, or a string sent as-is
//!   - text: "Done."
//! summary: "What the summary request gets."  # optional; compaction asks with no tools
//! ```

use std::path::Path;
use std::sync::Mutex;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::offline::Offline;
use super::{Ask, AssistantMessage, Model, ModelError, ModelReply, ToolCall, Usage};

/// A scripted model's file (`--model script:FILE`, YAML or JSON): the turns it plays in
/// order, whatever the harness sends, and the answers it gives the risk classifier.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Scripted model")]
struct Script {
    /// The model's turns, in order: one per model call of the loop. A turn without tool calls
    /// ends the session with its text as the answer; asking past the last turn is an error.
    turns: Vec<Turn>,
    /// What a compaction's summary request gets (it uses no turn); empty when absent.
    #[serde(default)]
    summary: Option<String>,
    /// The risk classifier's answers, in order: one for each call that no rule decides (with
    /// the built-in rules: every `write_file`, `search_replace` and most `bash` calls; a
    /// `read_file` inside the workspace is allowed by a rule). The classifier uses the run's
    /// model unless `--classifier-model` or `--no-classifier` says otherwise. When none is
    /// left for a call the classifier judges, the call is refused and the session stops with
    /// an error that says so.
    #[serde(default)]
    verdicts: Vec<Verdict>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Turn {
    /// The assistant's text (the answer, on the last turn).
    #[serde(default)]
    text: String,
    /// The calls this turn makes, run in order.
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    /// What this turn "costs" in USD, to exercise `--max-cost`; 0 when absent.
    #[serde(default)]
    cost: f64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    /// The tool: `bash`, `read_file`, `write_file`, `search_replace`, or any tool the session
    /// offers (an unknown one gets the model an error, as a real model's would).
    name: String,
    /// The tool's arguments: an object, or a string sent as it is (to exercise bad JSON).
    #[serde(default = "empty_object")]
    arguments: Value,
    /// For an `agent` call: the subagent's own script (its turns, summary and verdicts), which
    /// its children's calls may nest in turn.
    #[serde(default)]
    agent: Option<Box<Script>>,
}

/// One answer of the risk classifier, as the seed's classifier asks for it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Verdict {
    /// 0 (harmless) to 3 (destructive): at 2.5 or more the call is denied.
    risk: f64,
    /// 0 to 1, how clearly the user's request authorises the call: a risk under 1 with an
    /// authorisation of 0.5 or more is allowed; anything else is asked about.
    authorized: f64,
    #[serde(default)]
    rationale: String,
}

/// The JSON Schema of a scripted model's file (`proto-docs/scripted-model.schema.json`).
pub fn schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Script)).expect("a schema always serializes")
}

fn empty_object() -> Value {
    json!({})
}

pub struct ScriptedModel {
    path: String,
    script: Script,
    next_turn: Mutex<usize>,
    next_verdict: Mutex<usize>,
}

impl ScriptedModel {
    pub fn load(path: &Path) -> Result<ScriptedModel, ModelError> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| ModelError::Script(format!("reading {}: {err}", path.display())))?;
        let script: Script = serde_norway::from_str(&text)
            .map_err(|err| ModelError::Script(format!("{}: {err}", path.display())))?;
        Ok(ScriptedModel {
            path: path.display().to_string(),
            script,
            next_turn: Mutex::new(0),
            next_verdict: Mutex::new(0),
        })
    }

    /// The script as it goes on after `turns` turns and `verdicts` classifier answers were
    /// played: a fork's children continue their parent's script where the parent was.
    pub fn skipping(self, turns: usize, verdicts: usize) -> Result<ScriptedModel, ModelError> {
        if turns >= self.script.turns.len() {
            return Err(ModelError::Script(format!(
                "{} has {} turns and the session played {turns} of them before the fork: nothing is left to continue with (give the children a script of their own with --model script:FILE)",
                self.path,
                self.script.turns.len()
            )));
        }
        *self.next_turn.lock().unwrap_or_else(|p| p.into_inner()) = turns;
        *self.next_verdict.lock().unwrap_or_else(|p| p.into_inner()) = verdicts;
        Ok(self)
    }
}

impl ScriptedModel {
    /// The script of the subagent that the call `call_id` (`script_<turn>_<call>`) starts:
    /// that call's `agent:` section.
    fn child(&self, call_id: &str) -> Result<ScriptedModel, ModelError> {
        let place = call_id
            .strip_prefix("script_")
            .and_then(|rest| rest.split_once('_'))
            .and_then(|(turn, call)| {
                Some((turn.parse::<usize>().ok()?, call.parse::<usize>().ok()?))
            });
        let missing = || {
            ModelError::Script(format!(
                "{}: the call {call_id} starts a subagent, and the script gives it no `agent:` script (docs/scripted-model.md, \"Subagents\")",
                self.path
            ))
        };
        let (turn, call) = place.ok_or_else(missing)?;
        let script = self
            .script
            .turns
            .get(turn.wrapping_sub(1))
            .and_then(|t| t.tool_calls.get(call.wrapping_sub(1)))
            .and_then(|c| c.agent.as_deref())
            .ok_or_else(missing)?;
        Ok(ScriptedModel {
            path: format!("{}#turn{turn}.call{call}", self.path),
            script: script.clone(),
            next_turn: Mutex::new(0),
            next_verdict: Mutex::new(0),
        })
    }
}

impl Offline for ScriptedModel {
    const SOURCE: &'static str = "scripted";

    fn subagent(&self, call_id: &str) -> Result<Option<std::sync::Arc<dyn Model>>, ModelError> {
        Ok(Some(std::sync::Arc::new(self.child(call_id)?)))
    }

    fn describe(&self) -> String {
        format!(
            "script:{} (a scripted model: it plays a file of turns, no language model is called)",
            self.path
        )
    }

    fn answer(&self, ask: &Ask) -> Result<ModelReply, ModelError> {
        if let Ask::Structured { .. } = ask {
            let verdict = {
                let mut next = self.next_verdict.lock().unwrap_or_else(|p| p.into_inner());
                let verdict = self.script.verdicts.get(*next).cloned();
                *next += 1;
                verdict
            };
            let verdict = verdict.ok_or_else(|| {
                ModelError::NoVerdict(format!(
                    "{} has no `verdicts` left for the classifier, which judges every call \
                 no rule decides: add one `{{risk, authorized, rationale}}` per such call \
                 (docs/scripted-model.md), or run with --no-classifier",
                    self.path
                ))
            })?;
            let verdict = json!(verdict);
            let raw = json!({"scripted": true, "verdict": verdict});
            return Ok(ModelReply::free_text(verdict.to_string(), raw));
        }
        // A compaction's summary is answered without using a turn.
        if *ask == Ask::Summary {
            let content = self.script.summary.clone().unwrap_or_default();
            let raw = json!({"scripted": true, "summary": content});
            let message = AssistantMessage {
                content,
                ..AssistantMessage::default()
            };
            return Ok(ModelReply {
                message,
                usage: Usage::default(),
                cost: Some(0.0),
                raw,
            });
        }
        let turn_idx = {
            let mut next = self.next_turn.lock().unwrap_or_else(|p| p.into_inner());
            let idx = *next;
            *next += 1;
            idx
        };
        let turn = self.script.turns.get(turn_idx).ok_or_else(|| {
            ModelError::Script(format!(
                "{} has {} turns and turn {} was asked for",
                self.path,
                self.script.turns.len(),
                turn_idx + 1
            ))
        })?;
        let tool_calls = turn
            .tool_calls
            .iter()
            .enumerate()
            .map(|(call_idx, call)| ToolCall {
                id: format!("script_{}_{}", turn_idx + 1, call_idx + 1),
                name: call.name.clone(),
                arguments: match &call.arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect();
        let message = AssistantMessage {
            content: turn.text.clone(),
            tool_calls,
            provider_items: None,
        };
        let raw = json!({"scripted": true, "turn": turn_idx + 1});
        Ok(ModelReply {
            message,
            usage: Usage::default(),
            cost: Some(turn.cost),
            raw,
        })
    }
}
