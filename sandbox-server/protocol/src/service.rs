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
    /// Whether the server speaks HTTPS (`--tls-cert`); plain HTTP is then refused.
    #[serde(default)]
    pub tls: bool,
    /// Whether a client certificate from the server's CA is required (`--client-ca`).
    #[serde(default)]
    pub mtls: bool,
}

/// One layer of containment and whether it is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Protection {
    pub name: ProtectionName,
    pub active: bool,
    /// What it does here, or why it could not be applied.
    pub detail: String,
}

/// The layers of containment a server reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProtectionName {
    /// Each command leads its own process group, so a timeout reaches all of it.
    ProcessGroup,
    /// Commands get a clean environment: none of the server's variables.
    CleanEnvironment,
    /// rlimits on each command (processes, open files, core dumps).
    ResourceLimits,
    /// Commands run as an unprivileged user.
    UnprivilegedUser,
    /// Landlock confines writes (and reads of hidden paths).
    Landlock,
    /// A seccomp filter refuses sockets other than Unix ones.
    NetworkNone,
    /// Each command runs in an empty network namespace.
    NetworkNamespace,
    /// Each command has its own cgroup (pids, memory).
    Cgroup,
    /// Commands run in a PID namespace of the sandbox's own, with a `/proc` of their own: they
    /// see and signal only the processes the sandbox started.
    PidNamespace,
    /// Commands may open only the device nodes programs need (`null`, `zero`, `full`,
    /// `random`, `urandom`, `tty`, `ptmx`, `pts/*`, `shm`).
    Devices,
    /// Landlock's scopes: commands signal only processes of their own sandbox and connect to no
    /// abstract Unix socket made outside it.
    SignalScope,
    /// The server and its helper processes are not dumpable: no command reads their memory or
    /// environment through `/proc` or `ptrace`.
    NotDumpable,
    /// Commands do not see the homes (`/root`, `/home`, the server's own), the host's temporary
    /// folders, container secrets and engine sockets: their mount namespace shows them empty,
    /// Landlock refuses reading them, or both; the workspace, their private home and the
    /// toolchains of the homes (read-only) are shown again.
    HiddenHome,
    /// Commands make no set-user-id or set-group-id file: the seccomp filter refuses the bits,
    /// and the workspace is mounted so as not to honour them.
    NoSetId,
    /// A name this client does not know (a newer server).
    #[serde(other, skip_serializing)]
    Unknown,
}

crate::serde_names!(ProtectionName);

/// The answer of `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InfoResponse {
    /// The sandbox-server version.
    pub version: String,
    /// The enabled tools, in listing order.
    pub tools: Vec<String>,
    /// The absolute path of the workspace root on the server's machine.
    pub workspace_root: String,
    /// Where file tools may reach: the workspace root, or `/` when the whole container is the
    /// boundary (`--files-anywhere`).
    #[serde(default)]
    pub file_boundary: String,
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
    /// Bytes of request bodies held in memory at once over every route; past it a request
    /// waits, then gets 429. File and archive uploads stream and count for nothing here.
    #[serde(default)]
    pub max_inflight_body_bytes: u64,
    /// The most bytes a `PUT /v1/workspace/archive` may send and unpack to.
    #[serde(default)]
    pub archive_max_bytes: u64,
    /// The most entries such an archive may hold.
    #[serde(default)]
    pub archive_max_entries: u64,
    /// The most paths a snapshot, a change list or `GET /v1/workspace/archive` may find in the
    /// workspace, and the most entries one folder's listing may hold; past it they stop (413).
    #[serde(default)]
    pub scan_max_entries: u64,
    /// The most bytes of lines `read_file` gathers for one page (the rest are counted only).
    #[serde(default)]
    pub read_file_page_bytes: u64,
    /// Tool calls running at once; one more is refused with 429.
    pub max_concurrent_calls: u64,
    /// Followers of process output at once (event streams, WebSockets, waiting long-polls);
    /// one more is refused with 429.
    #[serde(default)]
    pub max_followers: u64,
    /// `bash` timeout when the call gives none, in seconds.
    pub default_timeout_secs: u64,
    /// The largest `bash` timeout a call may ask for, in seconds.
    pub max_timeout_secs: u64,
    /// After SIGTERM, how long a timed-out command's processes get before SIGKILL, in milliseconds.
    pub kill_grace_ms: u64,
    /// Whether written files are fsynced before they replace the old ones (`--durable-writes`);
    /// writes are atomic either way.
    #[serde(default)]
    pub durable_writes: bool,
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
    /// Every live operating-system process the server started.
    pub processes: Vec<ProcessInfo>,
    /// The processes and shells started by id (`POST /v1/processes`, `POST /v1/shells`), the
    /// ended ones included until they are deleted.
    #[serde(default)]
    pub managed: Vec<crate::process::ManagedProcess>,
}

/// The answer of `DELETE /v1/processes` and `DELETE /v1/processes/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessKillResponse {
    /// Every process that was signalled: the one named and its descendants.
    pub killed: Vec<u32>,
    /// Whether any of them needed SIGKILL after the grace period.
    pub forced: bool,
    /// The command line of each, read before its signal, in the order of `killed`.
    #[serde(default)]
    pub commands: Vec<String>,
}

/// One entry of `GET /v1/dirs/{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DirEntry {
    pub name: String,
    /// Symlinks are not followed.
    pub kind: EntryKind,
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

/// The answer of `GET /v1/paths/{path}`: where a path leads, its symlinks followed as the file
/// tools follow them. A command that reads the path reads what is there: the policy asks
/// before it lets `cat notes.txt` read a link to a home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PathInfo {
    /// The path as given.
    pub path: String,
    /// What is there once the links are followed; absent when nothing is (or the path leads
    /// out of the workspace).
    #[serde(default)]
    pub kind: Option<EntryKind>,
    /// Where the path, or a symlink on its way, leads out of the workspace: an absolute path,
    /// `..` resolved by name. Absent when it stays inside.
    #[serde(default)]
    pub leads_to: Option<String>,
}

/// The answer of `PUT /v1/files/{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FilePutResponse {
    pub path: String,
    pub bytes_written: u64,
    /// Whether the file did not exist before (the status is then 201).
    pub created: bool,
    /// What the server did otherwise than asked: set-user-id and set-group-id bits of `mode`
    /// are never set (no file where commands run is set-id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What a path is. Symlinks are never followed.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

crate::serde_names!(EntryKind);

/// One version of a path in a manifest or a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileVersion {
    pub kind: EntryKind,
    pub size: u64,
    /// Permission bits, e.g. 420 (0o644).
    pub mode: u32,
    /// Hex sha256 of a file's content; its bytes are at `GET /v1/blobs/{sha256}`. A sparse file
    /// (fewer bytes on disk than its size) over `--blob-max-file-bytes` is not read: this is
    /// then a digest of its size, times and inode, which changes whenever the file does, and
    /// which no blob has.
    pub sha256: Option<String>,
    /// A symlink's target.
    pub target: Option<String>,
}

/// A file whose content the client already holds, one line of `sandbox-server serve
/// --known-files` (JSON Lines): the server's first snapshot takes the file's hash from here,
/// without reading it or keeping a copy, while `stat` still gives the file the size, times and
/// inode recorded; a file whose `stat` differs is read and hashed as any other. (A fork's child
/// workspace: its files were just verified, and the client has every blob.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownFile {
    /// Relative to the workspace root, `/`-separated, UTF-8 (other names are hashed as usual).
    pub path: String,
    /// Hex sha256 of the content.
    pub sha256: String,
    pub size: u64,
    /// `st_mtime` and its nanoseconds.
    pub mtime: [i64; 2],
    /// `st_ctime` and its nanoseconds.
    pub ctime: [i64; 2],
    pub ino: u64,
}

/// One path of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ManifestEntry {
    /// Relative to the workspace root, `/`-separated. A name that is not UTF-8 shows each
    /// such byte as `\\xHH`; `path_b64` then holds the exact bytes.
    pub path: String,
    /// The path's exact bytes in base64, present only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    #[serde(flatten)]
    pub version: FileVersion,
}

/// The answer of `POST /v1/workspace/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotResponse {
    pub snapshot_id: String,
    pub n_files: u64,
    pub n_bytes: u64,
    /// Files whose content was read and hashed for this snapshot (the rest were unchanged, or
    /// sparse and over `--blob-max-file-bytes`, which are not read).
    pub n_hashed: u64,
    pub taken_at: String,
    /// Paths left out: changed while they were walked (a folder swapped for a symlink, a file
    /// for a FIFO), or unreadable.
    #[serde(default)]
    pub skipped: Vec<SkippedPath>,
}

/// A path a walk left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SkippedPath {
    pub path: String,
    /// The path's exact bytes in base64, present only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub reason: String,
}

/// The answer of `GET /v1/workspace/snapshots/{id}`: every path, sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ManifestResponse {
    pub snapshot_id: String,
    pub entries: Vec<ManifestEntry>,
}

/// How a path differs between two snapshots.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    /// The content (or a symlink's target) changed.
    Modified,
    Deleted,
    /// Only the permission bits changed.
    ModeChanged,
    /// A file became a folder, a symlink, …
    TypeChanged,
}

crate::serde_names!(ChangeKind);

/// What happened to one path between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileChange {
    pub path: String,
    /// The path's exact bytes in base64, present only when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub change: ChangeKind,
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
    /// Paths the new snapshot left out (see `SnapshotResponse.skipped`).
    #[serde(default)]
    pub skipped: Vec<SkippedPath>,
}

/// What a tool call's caller needs to record the step, returned with the tool's result (as
/// `step`) when `POST /v1/tools/{name}` asks for it: one round trip instead of a call followed
/// by changes, blobs, artifacts and the fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolStep {
    /// With `?since=ID`: the workspace changes the call made since snapshot `ID`, with the new
    /// snapshot to pass as the next `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangesResponse>,
    /// With `?fingerprint=true`: the state fingerprint after the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<FingerprintResponse>,
    /// Bytes up to `?inline_max_bytes` each, base64, by hex sha256: the new file versions in
    /// `changes` and the output streams of a command. Anything not here is at
    /// `GET /v1/blobs/{sha256}` or `GET /v1/artifacts/{id}`.
    #[serde(default)]
    pub inline: std::collections::BTreeMap<String, String>,
}

/// The answer of `POST /v1/reset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResetResponse {
    /// The pids of the processes killed.
    pub killed: Vec<u32>,
    /// The entries removed from the workspace root.
    pub n_removed: u64,
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
    pub protocol: SocketProtocol,
    pub address: String,
    pub port: u16,
    /// The pid that holds it, when it is one of the server's processes.
    pub pid: Option<u32>,
}

/// The protocol of a listening socket.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SocketProtocol {
    Tcp,
    Tcp6,
}

crate::serde_names!(SocketProtocol);

/// What a watched path is now.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WatchedKind {
    File,
    Dir,
    Symlink,
    Other,
    Missing,
}

crate::serde_names!(WatchedKind);

/// A watched path outside the workspace and the hash of what is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WatchedPath {
    pub path: String,
    pub kind: WatchedKind,
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
