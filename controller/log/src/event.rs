//! The event types of a session log. `proto-docs/event-log.schema.json` is generated from
//! these; `proto-docs/event-log.md` explains them.

use sandbox_protocol::{ChangeKind, EntryKind, SocketProtocol, WatchedKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod batch;
mod bench;
mod subagent;
pub use batch::*;
pub use bench::*;
pub use subagent::*;

use super::kinds::{
    DecisionSource, Durability, ErrorClass, FailureClass, Outcome, Purpose, SandboxKind, SettledBy,
    Stream, ToolStatus, Verdict,
};

/// The format version in `session_started`; bumped when a change breaks readers.
pub const FORMAT_VERSION: u32 = 1;

/// One line of the log: `{"seq", "ts", "type", "data"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// Gap-free, increasing from 0, assigned by the single writer.
    pub seq: u64,
    /// When the writer received the event, RFC 3339 UTC with milliseconds.
    pub ts: String,
    #[serde(flatten)]
    pub event: Event,
}

/// What happened. New types may appear in later versions; readers that render or measure
/// should skip types they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum Event {
    /// Always the first line: the header.
    SessionStarted(Box<SessionStarted>),
    /// The workspace as the agent found it: the base for restore and rerun.
    WorkspaceSnapshot(WorkspaceSnapshot),
    ModelRequest(ModelRequest),
    ModelResponse(ModelResponse),
    PolicyDecision(PolicyDecision),
    /// A hook ran: its input, answer, time and what it decided.
    HookRun(super::hook::HookRunEvent),
    ToolCall(ToolCallEvent),
    ToolResult(ToolResult),
    /// Files changed by a tool call, whichever tool it was.
    WorkspaceChanged(WorkspaceChanged),
    /// Processes, listeners and watched paths, when they changed.
    StateFingerprint(StateFingerprint),
    Compaction(Compaction),
    Error(ErrorEvent),
    CheckResult(CheckResult),
    /// A benchmark task's image was built, or found built (`cached`).
    ImageBuilt(ImageBuilt),
    /// A step of a multi-step benchmark task begins: its instruction is the next prompt.
    StepStarted(StepStarted),
    /// A multi-step benchmark task's steps scored: each step's and the task's rewards.
    StepsFinished(StepsFinished),
    /// Between a benchmark task's agent and its verifier: the agent's processes ended, the
    /// verifier's folders put back as the image had them, and what the agent had changed there.
    VerifierIsolated(VerifierIsolated),
    /// A benchmark task's verifier ran: its rewards, or how it failed.
    VerifierFinished(VerifierFinished),
    /// A child session began on an `agent` call (`agents/…` in this folder).
    SubagentStarted(SubagentStarted),
    /// A child session ended; the call's `tool_result` follows.
    SubagentFinished(Box<SubagentFinished>),
    /// Always the last line of a session that ended (not of one that was killed).
    SessionFinished(SessionFinished),
    /// A batch's own log (`<batch folder>/events.jsonl`): always its first line.
    BatchStarted(BatchStarted),
    /// A task's attempt began; its session log is `log_dir`.
    TaskStarted(TaskStarted),
    /// A task's attempt ended.
    TaskFinished(TaskFinished),
    /// A task's attempt failed on the infrastructure and runs again on a fresh sandbox.
    TaskRetried(TaskRetried),
    /// `--resume`: a task whose log had finished already, not run again.
    TaskSkipped(TaskSkipped),
    /// A task of the batch's datasets the harness cannot run (its folder cannot be loaded, or
    /// asks for what this harness does not do); the others run.
    TaskNotRunnable(TaskNotRunnable),
    /// The last line of a batch that ended (Ctrl-C included).
    BatchFinished(BatchFinished),
}

/// An event's `type` without its data: what a reader matches on before it reads the rest.
/// [`Event::kind`] names each event's; `Other` is a type this version does not know (a newer
/// writer's, or junk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    SessionStarted,
    WorkspaceSnapshot,
    ModelRequest,
    ModelResponse,
    PolicyDecision,
    HookRun,
    ToolCall,
    ToolResult,
    WorkspaceChanged,
    StateFingerprint,
    Compaction,
    Error,
    CheckResult,
    ImageBuilt,
    StepStarted,
    StepsFinished,
    VerifierIsolated,
    VerifierFinished,
    SubagentStarted,
    SubagentFinished,
    SessionFinished,
    BatchStarted,
    TaskStarted,
    TaskFinished,
    TaskRetried,
    TaskSkipped,
    TaskNotRunnable,
    BatchFinished,
    #[serde(other)]
    Other,
}

sandbox_protocol::serde_names!(EventKind);

impl EventKind {
    /// The bytes `"<type>"`, quoted as in a line: a reader finds the lines of this kind
    /// before it parses them.
    pub fn needle(self) -> String {
        format!("\"{}\"", self.as_str())
    }
}

impl Event {
    /// The `type` string of this event.
    pub fn kind(&self) -> &'static str {
        sandbox_protocol::names::variant_name(self)
    }
}

/// A payload stored once in `blobs/<sha256>` beside the log, written before the event that
/// names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlobRef {
    pub sha256: String,
    pub size: u64,
}

/// Text inline when short (at most 4 KiB), else a blob with a preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Text {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// The first characters, when the text is a blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Length in bytes.
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionStarted {
    pub format_version: u32,
    pub session_id: String,
    pub harness_version: String,
    /// The user's task.
    pub task: String,
    pub config: RunSettings,
    /// The system prompt the model was given; null when the session failed before it was built.
    pub system_prompt: Option<Text>,
    /// The tools as handed to the model (names, descriptions, schemas), as JSON; null likewise.
    pub tools: Option<BlobRef>,
    /// A session forked from another at one of its steps (`harness replay fork`): it began with
    /// that session's conversation and workspace as they were after that event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// A subagent: the session and the `agent` call that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_of: Option<SubagentOf>,
}

/// Where a forked session began (`session_started.forked_from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkedFrom {
    /// The parent session's id.
    pub session_id: String,
    /// The parent's log folder, as the fork was given it.
    pub log_dir: String,
    /// The parent's event after which this session began.
    pub seq: u64,
    /// The parent's turns before the fork (this session's turns are numbered after them).
    pub turns: u32,
    /// The parent's messages the model had at that point (the conversation this session got).
    pub n_messages: u64,
    /// The fork this session is one child of (`forks.json` in the fork's folder).
    pub fork_id: String,
    /// Its number among the fork's children, from 1.
    pub child: u32,
}

/// The effective configuration of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    pub model: String,
    /// How the model describes itself (provider, endpoint; says when it is scripted).
    pub model_description: String,
    pub reasoning_effort: Option<String>,
    pub web_search: bool,
    pub max_turns: u32,
    pub max_cost: f64,
    pub compact_at: u64,
    pub tool_names: Vec<String>,
    /// Which policy decided tool calls.
    pub policy: String,
    pub sandbox: SandboxKind,
    /// Empty when the sandbox never started.
    pub sandbox_url: String,
    /// `docker`: the container and its limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerRecord>,
    /// The longest the session may run, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_secs: Option<u64>,
    /// The workspace root inside the sandbox (outputs that print it are normalised by rerun).
    pub workspace_root: Option<String>,
    pub working_dir: Option<String>,
    pub setup: Vec<String>,
    pub check: Option<String>,
    pub log_durability: Durability,
    /// `model` (or absent), `oracle` or `nop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A benchmark task (Harbor or Terminal-Bench): its format, name, folder and content hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<BenchmarkRecord>,
    /// The `agent` tool's limits, when the session has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<SubagentLimits>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSnapshot {
    pub snapshot_id: String,
    /// The manifest (a JSON array of `{path, kind, size, mode, sha256, target}`); every file's
    /// content is a blob of this log.
    pub manifest: BlobRef,
    pub n_files: u64,
    pub n_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelRequest {
    /// The loop turn, from 1.
    pub turn: u32,
    pub purpose: Purpose,
    pub n_messages: u64,
    pub estimated_tokens: u64,
    /// The full request body sent to the provider.
    pub body: BlobRef,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelResponse {
    pub turn: u32,
    pub purpose: Purpose,
    pub text: Text,
    pub tool_calls: Vec<LoggedCall>,
    pub usage: LoggedUsage,
    /// USD; null when the model has no known price.
    pub cost: Option<f64>,
    pub latency_ms: u64,
    /// The provider's raw response body.
    pub raw: BlobRef,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoggedCall {
    pub id: String,
    pub name: String,
    /// The raw JSON text the model produced.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoggedUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
}

impl LoggedUsage {
    /// Adds another reply's (or session's) tokens to these.
    pub fn add(&mut self, other: &LoggedUsage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.output_tokens += other.output_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyDecision {
    pub call_id: String,
    pub tool: String,
    /// As decided before any person was asked.
    pub decision: Verdict,
    /// The final word: whether the call runs.
    pub allowed: bool,
    pub reason: String,
    /// What decided; an ask is then settled as `settled_by` says.
    pub source: DecisionSource,
    /// The pattern that matched, when a rule decided.
    #[serde(default)]
    pub rule: Option<String>,
    /// The classifier's scores and model, when it answered.
    #[serde(default)]
    pub risk: Option<f64>,
    #[serde(default)]
    pub authorized: Option<f64>,
    #[serde(default)]
    pub classifier_model: Option<String>,
    /// How an ask was settled.
    #[serde(default)]
    pub settled_by: Option<SettledBy>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallEvent {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub status: ToolStatus,
    /// The text the model saw.
    pub output: Text,
    pub exit_code: Option<i32>,
    pub timed_out: Option<bool>,
    pub duration_ms: u64,
    /// The full output streams of a command.
    pub outputs: Vec<OutputRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputRecord {
    pub stream: Stream,
    /// The sandbox's hash of the stream's kept bytes.
    pub sha256: String,
    pub size: u64,
    /// Bytes printed; larger than `size` when the sandbox capped the stream.
    pub total_bytes: u64,
    /// The bytes, in this log.
    pub blob: Option<BlobRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceChanged {
    /// The tool call after which the changes were seen.
    pub call_id: String,
    pub snapshot_id: String,
    pub changes: Vec<ChangeRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeRecord {
    pub path: String,
    pub change: ChangeKind,
    pub before: Option<VersionRecord>,
    pub after: Option<VersionRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionRecord {
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    /// A file's content hash; the bytes are a blob of this log.
    pub sha256: Option<String>,
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateFingerprint {
    /// The tool call after which it was taken; null at the start and end.
    pub call_id: Option<String>,
    pub processes: Vec<ProcessRecord>,
    pub listening: Vec<ListenerRecord>,
    pub watched: Vec<WatchedRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessRecord {
    pub pid: u32,
    pub command: String,
    pub started_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListenerRecord {
    pub protocol: SocketProtocol,
    pub address: String,
    pub port: u16,
    pub pid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchedRecord {
    pub path: String,
    pub kind: WatchedKind,
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    pub summary: Text,
    /// The messages the summary replaced, as JSON.
    pub replaced: BlobRef,
    pub n_replaced: u64,
    pub n_before: u64,
    pub n_after: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorEvent {
    pub class: ErrorClass,
    pub message: String,
    pub call_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckResult {
    pub command: String,
    pub passed: bool,
    pub exit_code: i32,
    pub output: Text,
    pub duration_ms: u64,
}

/// A `docker` sandbox's container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerRecord {
    pub id: String,
    pub image: String,
    pub memory_bytes: Option<i64>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFinished {
    pub outcome: Outcome,
    /// Why it did not pass; absent for a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureClass>,
    pub answer: Text,
    pub turns: u32,
    pub model_calls: u64,
    pub tool_calls: u64,
    pub usage: LoggedUsage,
    pub cost: f64,
    pub cost_known: bool,
    pub duration_ms: u64,
    /// What its subagents spent (not in the figures above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<SubagentTotals>,
}
