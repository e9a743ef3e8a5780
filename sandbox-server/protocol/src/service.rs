//! Service-level wire types: health, info, tool listing and background processes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The answer of `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// Always `ok` when the server answers.
    pub status: String,
    /// The containment of commands, as in force.
    pub protections: Vec<Protection>,
}

/// One layer of containment and whether it is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Protection {
    /// `process_group`, `clean_environment`, `resource_limits`, `unprivileged_user`,
    /// `landlock`, `network_none` or `network_namespace`.
    pub name: String,
    pub active: bool,
    /// What it does here, or why it could not be applied.
    pub detail: String,
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
    /// The containment of commands, as in force.
    pub protections: Vec<Protection>,
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

/// One version of a path in a manifest or a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileVersion {
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
    /// Permission bits, e.g. 420 (0o644).
    pub mode: u32,
    /// Hex sha256 of a file's content; its bytes are at `GET /v1/blobs/{sha256}`.
    pub sha256: Option<String>,
    /// A symlink's target.
    pub target: Option<String>,
}

/// One path of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ManifestEntry {
    /// Relative to the workspace root, `/`-separated.
    pub path: String,
    #[serde(flatten)]
    pub version: FileVersion,
}

/// The answer of `POST /v1/workspace/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotResponse {
    pub snapshot_id: String,
    pub n_files: u64,
    pub n_bytes: u64,
    /// Files whose content was hashed for this snapshot (the rest were unchanged).
    pub n_hashed: u64,
    pub taken_at: String,
}

/// The answer of `GET /v1/workspace/snapshots/{id}`: every path, sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ManifestResponse {
    pub snapshot_id: String,
    pub entries: Vec<ManifestEntry>,
}

/// What happened to one path between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileChange {
    pub path: String,
    /// `added`, `modified`, `deleted`, `mode_changed` or `type_changed`.
    pub change: String,
    pub before: Option<FileVersion>,
    pub after: Option<FileVersion>,
}

/// The answer of `GET /v1/workspace/changes?since=ID`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChangesResponse {
    pub since: String,
    /// A new snapshot of the state these changes lead to; pass it as the next `since`.
    pub snapshot_id: String,
    pub changes: Vec<FileChange>,
}

/// The answer of `PUT /v1/workspace/archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArchivePutResponse {
    pub n_files: u64,
    pub n_bytes: u64,
}

/// A listening socket in the sandbox's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListeningSocket {
    /// `tcp` or `tcp6`.
    pub protocol: String,
    pub address: String,
    pub port: u16,
    /// The pid that holds it, when it is one of the server's processes.
    pub pid: Option<u32>,
}

/// A watched path outside the workspace and the hash of what is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WatchedPath {
    pub path: String,
    /// `file`, `dir`, `symlink`, `other` or `missing`.
    pub kind: String,
    /// A file's sha256; for a folder, the sha256 of its sorted listing of names and hashes.
    pub sha256: Option<String>,
}

/// The answer of `GET /v1/state/fingerprint`: side effects that tool results do not show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FingerprintResponse {
    pub processes: Vec<ProcessInfo>,
    pub listening: Vec<ListeningSocket>,
    pub watched: Vec<WatchedPath>,
}
