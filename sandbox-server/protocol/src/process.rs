//! Managed processes and persistent shells: started under an id the client chooses, their
//! output kept in a numbered buffer that every reader resumes from a cursor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::tools::BashResult;

/// The pattern of a process id: letters, digits, `.`, `_` and `-`, with at least one that is
/// not a digit (a number names an operating-system process, `DELETE /v1/processes/{pid}`),
/// and not `.` or `..` (which clients that normalise paths cannot reach).
pub const PROCESS_ID_PATTERN: &str = "^(?!\\.{1,2}$)[A-Za-z0-9._-]*[A-Za-z._-][A-Za-z0-9._-]*$";

/// The variable that names, in every command's environment, the call that started it.
pub const CALL_ID_VARIABLE: &str = "SANDBOX_CALL_ID";
/// The variable that names, in every command's environment, the server that started it.
pub const SERVER_ID_VARIABLE: &str = "SANDBOX_SERVER_ID";
/// The variables the server sets in every command's environment to find its processes again;
/// a request may not set them.
pub const MARKER_VARIABLES: [&str; 2] = [CALL_ID_VARIABLE, SERVER_ID_VARIABLE];

/// A request's `env`: names a shell can take (letters, digits and `_`, not starting with a
/// digit), never one of [`MARKER_VARIABLES`]; values without a NUL byte.
fn env_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let markers = MARKER_VARIABLES.join("|");
    let names = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^(?!({markers})$)[A-Za-z_][A-Za-z0-9_]*$")));
    let values = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some("^[^\\u0000]*$"));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(format!(
            "Variables added to the commands' environment: names of letters, digits and `_` not \
             starting with a digit, except the server's markers ({}); values without a NUL byte.",
            MARKER_VARIABLES.join(", ")
        )))
        .property_names(Some(names))
        .additional_properties(Some(values))
        .build()
}

/// `POST /v1/processes`: start a command under an id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartProcessRequest {
    /// The client's name for the process, 1 to 64 characters (see the pattern). Starting the
    /// same id with the same body again answers with the process as it is now; with a
    /// different body it is refused with 409.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^(?!\\.{1,2}$)[A-Za-z0-9._-]*[A-Za-z._-][A-Za-z0-9._-]*$"
    )]
    pub id: String,
    /// Run by `bash -c`; not empty, no NUL byte.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub cmd: String,
    /// The working directory, relative to the workspace root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Variables added to the commands' environment.
    #[schema(schema_with = env_schema)]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Run under a pseudo-terminal of this size; its output is then one stream, `pty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
    /// Seconds until the process and everything it started are killed, 1 to 86400; without
    /// one it runs until it ends, is deleted or the server stops. No client's connection
    /// (or lack of one) ever ends it.
    #[schema(minimum = 1, maximum = 86400)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u32"
    )]
    pub timeout: Option<u32>,
}

/// The size of a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(deserialize_with = "crate::number::u16")]
    pub rows: u16,
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(deserialize_with = "crate::number::u16")]
    pub cols: u16,
}

/// What a managed process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    /// A command from `POST /v1/processes`.
    Command,
    /// A persistent shell from `POST /v1/shells`.
    Shell,
    /// A `bash` tool call, under its call id (the `Sandbox-Call-Id` header, or the
    /// `call_id` the server chose): its output can be followed while it runs, and signals
    /// and a delete reach it; it takes no input. Its artifacts are the call's own.
    Call,
}

crate::serde_names!(ProcessKind);

/// Where a managed process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Running,
    /// It ended by itself (`exit_code`, or `signal` when a signal ended it).
    Exited,
    /// `DELETE /v1/processes/{id}` (or a reset) killed it.
    Killed,
    /// Its timeout killed it.
    TimedOut,
}

/// The stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
    /// The pseudo-terminal of a `tty` process: its stdout and stderr together.
    Pty,
}

/// How a chunk's `data` is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// The bytes are valid UTF-8 and `data` is that text.
    #[default]
    Utf8,
    /// `data` is the bytes in standard base64.
    Base64,
}

/// A managed process as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ManagedProcess {
    pub id: String,
    pub kind: ProcessKind,
    pub cmd: String,
    /// The pid of its `bash`.
    pub pid: u32,
    /// While it runs: the folder its `bash` is in, relative to the workspace root when inside
    /// it (`.` for the root), absolute otherwise (a persistent shell that ran `cd ~`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub tty: Option<TtySize>,
    pub state: ProcessState,
    /// Set once it has ended; 128 + N when signal N ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Bytes it printed, per stream.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub pty_bytes: u64,
    /// The newest chunk's number (0 before any output): pass it as `after_seq` to wait for
    /// what comes next.
    pub last_seq: u64,
    /// The oldest chunk the buffer still holds; older ones were dropped to bound memory.
    pub first_seq: u64,
    /// Bytes of output dropped from the buffer so far (still counted in the totals above).
    pub dropped_bytes: u64,
    /// Whether its standard input is still open (never for a shell, whose input is its runs).
    pub stdin_open: bool,
    /// Once it has ended: the whole of each stream it printed on, kept as an artifact up to
    /// the artifact cap (`GET /v1/artifacts/{id}`), whatever left the buffer.
    pub artifacts: Vec<StreamArtifact>,
}

/// One stream's artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StreamArtifact {
    pub stream: OutputStream,
    pub artifact: crate::tools::Artifact,
}

/// One numbered chunk of output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OutputChunk {
    /// Numbers start at 1 and have no gaps across a process's streams.
    pub seq: u64,
    pub stream: OutputStream,
    /// Where the chunk starts in its stream, in bytes.
    pub offset: u64,
    pub encoding: Encoding,
    pub data: String,
}

/// Chunks after the reader's cursor that the buffer no longer holds (they are in the
/// process's artifacts once it ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DroppedOutput {
    /// The first and last dropped chunk numbers, inclusive.
    pub from_seq: u64,
    pub to_seq: u64,
    /// Their bytes: exact, unless the reader is more than 8192 chunks behind the buffer's
    /// start, when it counts those since the oldest drop the server remembers.
    pub bytes: u64,
}

/// The answer of `GET /v1/processes/{id}/output`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessOutput {
    pub chunks: Vec<OutputChunk>,
    /// Present when chunks after `after_seq` were dropped before this read.
    pub dropped: Option<DroppedOutput>,
    /// The cursor for the next read: the last chunk returned (or skipped as dropped), or
    /// `after_seq` when there was nothing new.
    pub next_after_seq: u64,
    /// Whether the process has ended and everything it printed has been returned.
    pub done: bool,
    pub process: ManagedProcess,
}

/// `POST /v1/processes/{id}/stdin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    /// What to write (may be empty, to only close).
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub encoding: Encoding,
    /// Close standard input after writing (the program sees end of file).
    #[serde(default)]
    pub close: bool,
}

/// The answer of `POST /v1/processes/{id}/stdin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StdinResponse {
    pub written: u64,
    pub stdin_open: bool,
}

/// The signals a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum SignalName {
    Int,
    Term,
    Kill,
    Hup,
    Quit,
    Usr1,
    Usr2,
    Stop,
    Cont,
    Winch,
}

/// `POST /v1/processes/{id}/signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    pub signal: SignalName,
}

/// `POST /v1/shells`: start a persistent shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartShellRequest {
    /// As for a process.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^(?!\\.{1,2}$)[A-Za-z0-9._-]*[A-Za-z._-][A-Za-z0-9._-]*$"
    )]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[schema(schema_with = env_schema)]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// `POST /v1/shells/{id}/run`: one command in the shell, which keeps its working directory,
/// variables and functions for the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cmd": "cd src && ls", "timeout": 30}))]
pub struct ShellRunRequest {
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub cmd: String,
    /// Seconds, 1 to 3600 (the server's default when absent); at the timeout the command is
    /// interrupted as by Ctrl-C, and the shell lives on.
    #[schema(minimum = 1, maximum = 3600)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u32"
    )]
    pub timeout: Option<u32>,
}

/// The answer of `POST /v1/shells/{id}/run`: what `bash` answers, and the shell's part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShellRunResult {
    #[serde(flatten)]
    pub result: BashResult,
    /// Whether `POST /v1/shells/{id}/interrupt` (or the timeout) interrupted the command.
    pub interrupted: bool,
    /// Whether the shell is still there for the next command (a command may `exit` it).
    pub shell_alive: bool,
}

/// What a client sends on `GET /v1/processes/{id}/pty` (a WebSocket) as a text frame; a binary
/// frame is input bytes as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PtyClientMessage {
    /// Typed input (or standard input for a process without a terminal).
    Input {
        data: String,
        #[serde(default)]
        encoding: Encoding,
    },
    Resize {
        #[serde(deserialize_with = "crate::number::u16")]
        rows: u16,
        #[serde(deserialize_with = "crate::number::u16")]
        cols: u16,
    },
    Signal {
        signal: SignalName,
    },
    /// Ctrl-D on a terminal; closes standard input otherwise.
    CloseStdin,
}

/// What the server sends on `GET /v1/processes/{id}/pty`, one text frame each. After `exit`
/// the server closes the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyServerMessage {
    Output(OutputChunk),
    Dropped(DroppedOutput),
    Exit {
        process: ManagedProcess,
    },
    /// A client message that could not be applied (the socket stays open), or why the stream
    /// ends early: the token that opened it was revoked or expired.
    Error {
        message: String,
    },
}

/// Arguments of `exec` (an opt-in tool): start a command and return after it ends or after
/// `yield_ms`, whichever is first, with its output so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cmd": "sleep 2; echo done", "yield_ms": 1000}))]
pub struct ExecArgs {
    /// The shell command, run by `bash -c` from the workspace root; not empty, no NUL byte.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub cmd: String,
    /// How long to wait for it before answering with what it printed so far, in
    /// milliseconds, 0 to 300000 (10000 when absent).
    #[schema(minimum = 0, maximum = 300000)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u32"
    )]
    pub yield_ms: Option<u32>,
    /// Run it under a terminal (for programs that want one: REPLs, editors, pagers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
}

/// Arguments of `write_stdin` (an opt-in tool): send input to a process `exec` started, wait,
/// return what it printed since the last look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"process_id": "p-1", "input": "print(6 * 7)\n", "yield_ms": 500}))]
pub struct WriteStdinArgs {
    /// The `process_id` that `exec` returned.
    #[schema(min_length = 1)]
    pub process_id: String,
    /// What to type (a newline runs a line); empty to only wait for more output.
    #[serde(default)]
    pub input: String,
    /// How long to wait for output before answering, in milliseconds, 0 to 300000 (2000 when
    /// absent); it answers as soon as the process ends.
    #[schema(minimum = 0, maximum = 300000)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u32"
    )]
    pub yield_ms: Option<u32>,
}

/// The result of `exec` and `write_stdin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExecResult {
    /// The model-facing text: `exit=N` or `running: …`, then the output since the last look.
    pub output: String,
    pub process_id: String,
    pub running: bool,
    /// Set once it has ended.
    pub exit_code: Option<i32>,
    /// The new output, cut for the model as `output` is (stdout and stderr together, in the order the server read them: lines printed on the two streams at the same moment may swap).
    pub new_output: String,
    /// The cursor after this look (see `GET /v1/processes/{id}/output`).
    pub last_seq: u64,
}

/// What an event is about, on `GET /v1/processes/{id}/events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SseEventName {
    /// `data` is an `OutputChunk`.
    Output,
    /// `data` is a `DroppedOutput`.
    Dropped,
    /// `data` is the `ManagedProcess` as it ended; the stream ends after it.
    Exit,
    /// `data` is why the stream ends before the process (a JSON string): the token that opened
    /// it was revoked or expired. A reconnection with it gets 401.
    Error,
}

/// One Server-Sent Event of `GET /v1/processes/{id}/events`, as its fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SseEvent {
    pub event: SseEventName,
    /// The number of the last chunk it covers: send it back as `Last-Event-ID` to resume.
    #[schema(pattern = "^[0-9]+$")]
    pub id: String,
    /// A JSON document, by `event`.
    pub data: String,
}
