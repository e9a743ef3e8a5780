//! Service-level wire types: health, info, tool listing and background processes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The answer of `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// Always `ok` when the server answers.
    pub status: String,
}

/// The answer of `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InfoResponse {
    /// The sandbox-server version.
    pub version: String,
    /// The enabled tools, in listing order.
    pub tools: Vec<String>,
    /// The absolute path of the workspace root on the server's machine.
    pub workspace_root: String,
    pub limits: Limits,
}

/// The limits the server enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Limits {
    /// Model-facing text (`output`, `stdout`, `stderr`) is cut to this many characters.
    pub output_limit_chars: u64,
    /// The full output of each stream is kept as an artifact up to this many bytes.
    pub artifact_cap_bytes: u64,
    /// Artifacts are evicted, oldest first, when their total size exceeds this.
    pub artifact_retention_bytes: u64,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: u64,
    /// Tool calls running at once; one more is refused with 429.
    pub max_concurrent_calls: u64,
    /// `bash` timeout when the call gives none, in seconds.
    pub default_timeout_secs: u64,
    /// The largest `bash` timeout a call may ask for, in seconds.
    pub max_timeout_secs: u64,
    /// After SIGTERM, how long a timed-out command's processes get before SIGKILL, in milliseconds.
    pub kill_grace_ms: u64,
}

/// One tool, as a model API expects it: name, description and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema (draft 2020-12 subset) of the tool's arguments object.
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
}

/// A live process that the server started, directly or as a descendant of a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The parent process id; the server's own pid for orphans it adopted.
    pub ppid: u32,
    /// The process group id.
    pub pgid: u32,
    /// The command line, arguments joined by spaces.
    pub command: String,
    /// When the process started, RFC 3339 UTC.
    pub started_at: String,
    /// The `bash` call that started it, when known.
    pub call_id: Option<String>,
    /// Whether the call that started it is still running (a foreground process) or has returned.
    pub foreground: bool,
}

/// The answer of `GET /v1/processes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessListResponse {
    pub processes: Vec<ProcessInfo>,
}

/// The answer of `DELETE /v1/processes/{pid}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessKillResponse {
    /// Every process that was signalled: the one named and its descendants.
    pub killed: Vec<u32>,
    /// Whether any of them needed SIGKILL after the grace period.
    pub forced: bool,
}

/// One entry of `GET /v1/dirs/{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DirEntry {
    pub name: String,
    /// `file`, `dir`, `symlink` or `other` (a FIFO, socket or device). Symlinks are not followed.
    pub kind: String,
    /// Size in bytes (of the link itself for a symlink).
    pub size: u64,
}

/// The answer of `GET /v1/dirs/{path}`: the entries sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DirListing {
    /// The path as given.
    pub path: String,
    pub entries: Vec<DirEntry>,
}

/// The answer of `PUT /v1/files/{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FilePutResponse {
    pub path: String,
    pub bytes_written: u64,
    /// Whether the file did not exist before (the status is then 201).
    pub created: bool,
}
