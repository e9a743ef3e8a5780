//! The HTTP wire types of the sandbox-server API, shared with the controller.
//!
//! This crate is the contract: every type here is serialized on the wire and described in
//! `proto-docs/openapi.json`. It holds no behaviour but the parsing of the values it defines
//! (and [`origin`], the rule on a browser's headers that both loopback programs apply), and
//! depends only on serde and utoipa's derives, so that both sides of the wire can depend on it
//! without pulling in a runtime.
//!
//! # Layout
//! - [`call`]: the built-in tools by name, and one tool call's arguments parsed once.
//! - [`error`]: the one error body every 4xx and 5xx answer carries.
//! - [`names`]: an enum's values by the names serde gives them, derived, for labels and parsers.
//! - [`service`]: health, info, the tool listing, background processes and raw files.
//! - [`tools`]: arguments and results of the four built-in tools.
//! - [`process`]: processes and shells started by id, and their numbered output.
//! - [`tokens`]: scoped, expiring tokens and the scopes of the API.
//! - [`egress`]: a benchmark phase's network allow list, and the egress proxy's policy file.
//! - [`origin`]: which `Host` and `Origin` a loopback program (the server, the viewer) answers.

pub mod call;
pub mod egress;
pub mod error;
pub mod names;
pub mod number;
pub mod origin;
pub mod process;
pub mod service;
pub mod tokens;
pub mod tools;

pub use call::{BuiltIn, ToolInput};
pub use error::{ErrorBody, ErrorResponse, ErrorType};
pub use process::{
    DroppedOutput, Encoding, ExecArgs, ExecResult, ManagedProcess, OutputChunk, OutputStream,
    PROCESS_ID_PATTERN, ProcessKind, ProcessOutput, ProcessState, PtyClientMessage,
    PtyServerMessage, ShellRunRequest, ShellRunResult, SignalName, SignalRequest, SseEvent,
    SseEventName, StartProcessRequest, StartShellRequest, StdinRequest, StdinResponse,
    StreamArtifact, TtySize, WriteStdinArgs,
};
pub use service::{
    ArchivePutResponse, ChangeKind, ChangesResponse, DirEntry, DirListing, EntryKind, FileChange,
    FilePutResponse, FileVersion, FingerprintResponse, HealthResponse, InfoResponse, KnownFile,
    Limits, ListeningSocket, ManifestEntry, ManifestResponse, PathInfo, ProcessInfo,
    ProcessKillResponse, ProcessListResponse, Protection, ProtectionName, ResetResponse,
    SkippedPath, SnapshotResponse, SocketProtocol, ToolSpec, ToolStep, WatchedKind, WatchedPath,
};
pub use tokens::{MintedToken, Scope, TokenInfo, TokenList, TokenRequest, TokenRevoked};
pub use tools::{
    Artifact, BashArgs, BashResult, ReadFileArgs, ReadFileResult, SearchReplaceArgs,
    SearchReplaceResult, ToolOutput, WriteFileArgs, WriteFileResult,
};

/// The header a parent process reads from the server's stdout to learn the bound address.
///
/// The line is `{"listening":"127.0.0.1:PORT"}`, printed once, before any request is served.
pub const LISTENING_KEY: &str = "listening";

/// With `--metrics-listen`, the same line also names the metrics address under this key.
pub const METRICS_KEY: &str = "metrics";
