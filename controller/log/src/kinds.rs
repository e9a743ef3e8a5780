//! The fixed value sets of the log. Each is an enum whose serde name is the string the log has
//! always carried, so readers see the same text and the compiler checks every `match`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a session ended (`session_finished.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A reply called no tool (and the task's check, if any, passed).
    Completed,
    TurnLimit,
    CostLimit,
    /// The session's lifetime (wall clock) ran out.
    TimeLimit,
    /// The agent finished but the task's check failed (a benchmark task's reward was below
    /// the pass threshold).
    CheckFailed,
    /// The grader gave no verdict: a benchmark task's verifier timed out, wrote no reward, or
    /// could not be read (the wire name is the log's since its first version).
    #[serde(rename = "verifier_failed")]
    NoVerdict,
    /// The model API, the sandbox or the harness failed; `failure` says which.
    Error,
    /// Ctrl-C.
    Interrupted,
}

/// Why a session or task did not pass, as reports group them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The agent finished but the task's check failed.
    Check,
    /// The grader gave no verdict (a benchmark task's verifier: no reward, a timeout): not a
    /// verdict on the agent, and never a pass.
    #[serde(rename = "verifier")]
    NoVerdict,
    /// A turn, cost or time limit stopped it.
    Limit,
    /// The model API failed (after its retries).
    Model,
    /// The sandbox died, could not start or stopped answering: the only class worth a retry.
    Infrastructure,
    /// Ctrl-C.
    Interrupted,
    /// Anything else: bad input, a tool the sandbox lacks, a failing setup command, a log error.
    Error,
}

/// How a benchmark task's verifier failed (`verifier_finished.failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifierFailure {
    /// It ran past its timeout.
    Timeout,
    /// It wrote no `reward.txt` or `reward.json`.
    NoReward,
    /// The reward file is empty.
    EmptyReward,
    /// The reward file holds no number (or not only numbers).
    BadReward,
    /// A Terminal-Bench 1 parser found nothing to judge in the test output (kept for logs
    /// written before such a run counted as unresolved).
    ParseError,
    /// The agent's changes to the verifier's folders resisted their reset: the tests did
    /// not run, and the trial scores 0.
    Tampered,
}

/// What an `error` event is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The model API failed after its retries.
    Model,
    /// A request to the sandbox failed.
    Sandbox,
    /// A tool call failed; the model saw `ERROR: …`.
    Tool,
    /// The policy could not decide.
    Policy,
    /// The sandbox was found dead, or would not start.
    Infrastructure,
    /// The session's lifetime ran out.
    Limit,
    /// Ctrl-C.
    Interrupted,
    /// The harness itself, or its input.
    Internal,
}

/// A policy's answer before anyone is asked (`policy_decision.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

/// What decided a call (`policy_decision.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    /// A deny, ask or allow rule matched.
    Rule,
    /// A read-only tool, which skips the classifier.
    ReadOnly,
    /// The risk classifier answered.
    Classifier,
    /// The classifier failed, timed out or answered out of range: the call is asked.
    ClassifierFailed,
    /// No rule matched and no classifier is configured: the call is asked.
    NoClassifier,
    /// `--policy allow-all`.
    AllowAll,
    /// A `pre_tool_use` hook denied or asked (its `hook_run` events say which and why).
    Hook,
}

/// Who settled an ask (`policy_decision.settled_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettledBy {
    /// The person at the terminal answered.
    Person,
    /// Nobody was at a terminal: the answer is no.
    NoTerminal,
    /// `--approve never`.
    ApproveNever,
    /// `--approve auto`.
    ApproveAuto,
}

/// What a tool call came to (`tool_result.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool ran; `output` is its text (a non-zero exit is still `ok`).
    Ok,
    /// The model saw `ERROR: …` (unknown tool, bad JSON, invalid arguments, a tool's refusal).
    Error,
    /// The policy refused it; the model saw the BLOCKED message.
    Blocked,
    /// The session was interrupted (Ctrl-C) while it ran: `output` is what it had printed by
    /// then; the model never saw it.
    Interrupted,
}

/// An output stream of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Why the model was asked (`model_request.purpose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A turn of the loop.
    Turn,
    /// A compaction's summary.
    Summary,
}

/// Where a session's sandbox ran (`session_started.config.sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// A sandbox-server child of the harness.
    Local,
    /// A fresh container through the Docker Engine API.
    Docker,
    /// A running server at a URL (a pool member included).
    Remote,
}

/// How hard the writer works to keep events on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// fsync every batch before `record` returns (default): nothing acknowledged is lost.
    Durable,
    /// Write to the OS at once, fsync at the end: a crash of the process loses nothing, a crash
    /// of the machine may lose the last events.
    Relaxed,
}

sandbox_protocol::serde_names!(
    Outcome,
    FailureClass,
    VerifierFailure,
    ErrorClass,
    Verdict,
    DecisionSource,
    SettledBy,
    ToolStatus,
    Stream,
    Purpose,
    SandboxKind,
    Durability,
);
