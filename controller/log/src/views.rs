//! Lenient views of log lines, for readers that must never fail on what they read (the viewer,
//! the reports): a field of the wrong type reads as absent, a type this version does not know
//! reads as [`View::Other`], and nothing is copied (the views borrow the parsed line, so a
//! hostile megabyte string costs nothing until a reader keeps it, cut to its own bound).
//!
//! The strict [`Envelope`](crate::Envelope) is for the replay; these are for looking. Each
//! field a reader looks at is named once, here, beside the types the writer writes, and a test
//! writes every viewed event with those types and reads it back: a renamed field fails there,
//! not as a blank page.

use serde_json::Value;

use crate::EventKind;

/// One line of a log, as far as it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    pub seq: Option<u64>,
    pub ts: Option<&'a str>,
    pub kind: EventKind,
    pub event: View<'a>,
}

impl<'a> Line<'a> {
    /// The view of a parsed line (any JSON: what is not an event reads as `Other`).
    pub fn of(line: &'a Value) -> Line<'a> {
        let at = Fields(line);
        let kind = at
            .str("type")
            .and_then(sandbox_protocol::names::from_name)
            .unwrap_or(EventKind::Other);
        Line {
            seq: at.u64("seq"),
            ts: at.str("ts"),
            kind,
            event: View::of(kind, at.get("data")),
        }
    }
}

/// What a reader looks at in an event of each kind it reads.
#[derive(Debug, Clone, PartialEq)]
pub enum View<'a> {
    SessionStarted(SessionStarted<'a>),
    ModelRequest {
        turn: Option<u64>,
    },
    ToolCall {
        arguments: Option<&'a str>,
    },
    ToolResult(ToolResult<'a>),
    WorkspaceChanged {
        /// The changed files' paths (those that read as strings).
        paths: Vec<&'a str>,
    },
    Error {
        message: Option<&'a str>,
    },
    VerifierFinished {
        reward: Option<f64>,
        message: Option<&'a str>,
    },
    SessionFinished(SessionFinished<'a>),
    BatchStarted(BatchStarted<'a>),
    TaskStarted(Task<'a>),
    TaskFinished(Task<'a>),
    TaskRetried(Task<'a>),
    TaskSkipped(Task<'a>),
    TaskNotRunnable(Task<'a>),
    BatchFinished {
        interrupted: Option<bool>,
        duration_ms: Option<u64>,
    },
    /// A kind no reader looks into, or one this version does not know.
    Other,
}

/// `session_started`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionStarted<'a> {
    pub task: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub model: Option<&'a str>,
    /// Who acted, when not the model (`config.agent`).
    pub agent: Option<&'a str>,
    /// A fork's parent: its session id and the step it was forked at.
    pub forked_from: Option<(&'a str, u64)>,
}

/// `tool_result`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolResult<'a> {
    pub name: Option<&'a str>,
    /// As written: a newer writer's status is kept, not lost.
    pub status: Option<&'a str>,
    pub duration_ms: Option<u64>,
    /// The output's text, or its preview when the text is a blob.
    pub output: Option<&'a str>,
}

/// `session_finished`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionFinished<'a> {
    /// As written (a newer writer's outcome is shown, not lost).
    pub outcome: Option<&'a str>,
    pub failure: Option<&'a str>,
    pub cost: Option<f64>,
    pub turns: Option<u64>,
    pub tool_calls: Option<u64>,
    pub duration_ms: Option<u64>,
    /// Input and output tokens, those of the two that read.
    pub tokens: u64,
}

/// `batch_started`: its tasks are read one by one, as far as the reader goes.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStarted<'a> {
    tasks: &'a [Value],
}

/// A task of `batch_started`'s list.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Listed<'a> {
    pub id: Option<&'a str>,
    pub task: Option<&'a str>,
    pub trial: Option<u64>,
}

/// A task's event in a batch's log (`task_*`): the fields each kind has, the others absent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Task<'a> {
    pub task: Option<&'a str>,
    pub attempt: Option<u64>,
    pub passed: Option<bool>,
    pub outcome: Option<&'a str>,
    pub failure: Option<&'a str>,
    pub cost: Option<f64>,
    pub duration_ms: Option<u64>,
    pub reason: Option<&'a str>,
}

impl<'a> BatchStarted<'a> {
    /// How many tasks it lists.
    pub fn n_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Its tasks, in order.
    pub fn tasks(&self) -> impl Iterator<Item = Listed<'a>> + use<'a> {
        self.tasks.iter().map(|listed| {
            let at = Fields(listed);
            Listed {
                id: at.str("id"),
                task: at.str("task"),
                trial: at.u64("trial"),
            }
        })
    }
}

impl<'a> View<'a> {
    fn of(kind: EventKind, data: Fields<'a>) -> View<'a> {
        match kind {
            EventKind::SessionStarted => View::SessionStarted(started(data)),
            EventKind::ModelRequest => View::ModelRequest {
                turn: data.u64("turn"),
            },
            EventKind::ToolCall => View::ToolCall {
                arguments: data.str("arguments"),
            },
            EventKind::ToolResult => View::ToolResult(result(data)),
            EventKind::WorkspaceChanged => View::WorkspaceChanged {
                paths: data.list("changes").filter_map(|c| c.str("path")).collect(),
            },
            EventKind::Error => View::Error {
                message: data.str("message"),
            },
            EventKind::VerifierFinished => View::VerifierFinished {
                reward: data.f64("reward"),
                message: data.str("message"),
            },
            EventKind::SessionFinished => View::SessionFinished(finished(data)),
            EventKind::BatchStarted => View::BatchStarted(BatchStarted {
                tasks: data.get("tasks").array(),
            }),
            EventKind::TaskStarted => View::TaskStarted(task(data)),
            EventKind::TaskFinished => View::TaskFinished(task(data)),
            EventKind::TaskRetried => View::TaskRetried(task(data)),
            EventKind::TaskSkipped => View::TaskSkipped(task(data)),
            EventKind::TaskNotRunnable => View::TaskNotRunnable(task(data)),
            EventKind::BatchFinished => View::BatchFinished {
                interrupted: data.bool("interrupted"),
                duration_ms: data.u64("duration_ms"),
            },
            _ => View::Other,
        }
    }
}

fn started(data: Fields<'_>) -> SessionStarted<'_> {
    let config = data.get("config");
    let fork = data.get("forked_from");
    SessionStarted {
        task: data.str("task"),
        session_id: data.str("session_id"),
        model: config.str("model"),
        agent: config.str("agent"),
        forked_from: fork.str("session_id").zip(fork.u64("seq")),
    }
}

fn result(data: Fields<'_>) -> ToolResult<'_> {
    let output = data.get("output");
    ToolResult {
        name: data.str("name"),
        status: data.str("status"),
        duration_ms: data.u64("duration_ms"),
        output: output.str("text").or_else(|| output.str("preview")),
    }
}

fn finished(data: Fields<'_>) -> SessionFinished<'_> {
    let usage = data.get("usage");
    SessionFinished {
        outcome: data.str("outcome"),
        failure: data.str("failure"),
        cost: data.f64("cost"),
        turns: data.u64("turns"),
        tool_calls: data.u64("tool_calls"),
        duration_ms: data.u64("duration_ms"),
        tokens: ["input_tokens", "output_tokens"]
            .into_iter()
            .filter_map(|field| usage.u64(field))
            .sum(),
    }
}

fn task(data: Fields<'_>) -> Task<'_> {
    Task {
        task: data.str("task"),
        attempt: data.u64("attempt"),
        passed: data.bool("passed"),
        outcome: data.str("outcome"),
        failure: data.str("failure"),
        cost: data.f64("cost"),
        duration_ms: data.u64("duration_ms"),
        reason: data.str("reason"),
    }
}

/// A JSON value read leniently: a missing field or one of another type is `None`.
#[derive(Clone, Copy)]
struct Fields<'a>(&'a Value);

impl<'a> Fields<'a> {
    fn get(self, field: &str) -> Fields<'a> {
        Fields(self.0.get(field).unwrap_or(&Value::Null))
    }

    fn str(self, field: &str) -> Option<&'a str> {
        self.0.get(field)?.as_str()
    }

    fn u64(self, field: &str) -> Option<u64> {
        self.0.get(field)?.as_u64()
    }

    fn f64(self, field: &str) -> Option<f64> {
        self.0.get(field)?.as_f64()
    }

    fn bool(self, field: &str) -> Option<bool> {
        self.0.get(field)?.as_bool()
    }

    fn array(self) -> &'a [Value] {
        self.0.as_array().map_or(&[], Vec::as_slice)
    }

    fn list(self, field: &str) -> impl Iterator<Item = Fields<'a>> + use<'a> {
        self.get(field).array().iter().map(Fields)
    }
}

#[cfg(test)]
mod tests;
