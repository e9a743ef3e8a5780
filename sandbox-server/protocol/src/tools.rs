//! Arguments and results of the built-in tools.
//!
//! Every result carries `output`: the text a model sees, laid out by the server so that every
//! client shows the model the same thing. Arguments reject unknown fields.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Arguments of `bash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cmd": "ls -la", "timeout": 30}))]
pub struct BashArgs {
    /// The shell command, run by `bash -c` from the workspace root; not empty, no NUL byte.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub cmd: String,
    /// Timeout in seconds, 1 to 3600; 120 when absent or null.
    #[schema(minimum = 1, maximum = 3600)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u32"
    )]
    pub timeout: Option<u32>,
}

/// The result of `bash`. A non-zero exit or a timeout is a result, not an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BashResult {
    /// The model-facing text: `exit=N`, then `stdout:` and `stderr:` blocks indented by two spaces.
    pub output: String,
    /// The shell's exit status; 128 + N when a signal N ended it.
    pub exit_code: i32,
    /// The signal that ended the shell, if one did.
    pub signal: Option<i32>,
    /// Whether the timeout fired and the command's processes were killed.
    pub timed_out: bool,
    /// Wall-clock time from spawn to return, in milliseconds.
    pub duration_ms: u64,
    /// Standard output as text, cut for the model (see `stdout_artifact` for all of it).
    pub stdout: String,
    /// Standard error as text, cut for the model (see `stderr_artifact` for all of it).
    pub stderr: String,
    pub stdout_artifact: Artifact,
    pub stderr_artifact: Artifact,
    /// Processes the command left running after the shell exited (see `GET /v1/processes`).
    pub background_pids: Vec<u32>,
    /// The id of this call, also found on its processes in `GET /v1/processes`.
    pub call_id: String,
}

/// What every tool's result carries, whatever else a tool plugin adds: the text for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolOutput {
    /// The model-facing text.
    pub output: String,
}

/// The full bytes of one output stream, kept on the server: `GET /v1/artifacts/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Artifact {
    pub id: String,
    /// Bytes stored in the artifact (at most the artifact cap).
    pub size: u64,
    /// Bytes the command printed on this stream; larger than `size` when `capped`.
    pub total_bytes: u64,
    /// Hex sha256 of the stored bytes.
    pub sha256: String,
    /// Whether the stream printed more than the artifact cap, so the artifact holds a prefix.
    pub capped: bool,
    /// Whether the text field was cut for the model.
    pub truncated: bool,
    /// Whether the stream held invalid UTF-8, replaced by U+FFFD in the text field.
    pub invalid_utf8: bool,
}

/// Arguments of `read_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "src/main.rs", "offset": 0, "limit": 100}))]
pub struct ReadFileArgs {
    /// Path relative to the workspace root.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub path: String,
    /// Lines to skip from the start; 0 when absent or null.
    #[schema(minimum = 0)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u64"
    )]
    pub offset: Option<u64>,
    /// Lines to return, 1 to 100000; 2000 when absent or null.
    #[schema(minimum = 1, maximum = 100000)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::number::option_u64"
    )]
    pub limit: Option<u64>,
}

/// The result of `read_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReadFileResult {
    /// Numbered lines, `{n:4}: text`, then a line saying where this page sits in the file.
    pub output: String,
    /// The path as given.
    pub path: String,
    /// Lines in the whole file.
    pub total_lines: u64,
    /// The number of the first line returned (1-based); `offset + 1`.
    pub first_line: u64,
    /// Lines returned in this page.
    pub lines_returned: u64,
    /// Whether `output` was cut to the output limit.
    pub truncated: bool,
}

/// Arguments of `write_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "notes/hello.txt", "content": "Hello, agent!\n"}))]
pub struct WriteFileArgs {
    /// Path relative to the workspace root; missing parent folders are created.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// The result of `write_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WriteFileResult {
    /// `wrote N bytes`.
    pub output: String,
    pub path: String,
    pub bytes_written: u64,
    /// Whether the file did not exist before.
    pub created: bool,
}

/// Arguments of `search_replace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "greeting.txt", "search": "world", "replace": "agent"}))]
pub struct SearchReplaceArgs {
    /// Path relative to the workspace root.
    #[schema(min_length = 1, pattern = "^[^\\u0000]+$")]
    pub path: String,
    /// Exact text that must occur exactly once in the file; not empty.
    #[schema(min_length = 1)]
    pub search: String,
    /// The text that replaces it.
    pub replace: String,
}

/// The result of `search_replace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SearchReplaceResult {
    /// `OK`.
    pub output: String,
    pub path: String,
    /// The size of the file after the replacement.
    pub bytes_written: u64,
}
