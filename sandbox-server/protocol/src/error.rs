//! The error body: `{"error": {"type": "...", "message": "..."}}`, and the closed set of types.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every 4xx and 5xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"error": {"type": "invalid_arguments", "message": "timeout: must be between 1 and 3600, got 0"}}))]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// What went wrong: a stable machine-readable type and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable snake_case identifier, for example `outside_workspace` or `invalid_arguments`.
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// A human-readable explanation naming what was wrong.
    pub message: String,
}

/// Every error type the server sends. Clients match on these; a newer server's type that this
/// version does not know reads as `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// 401: the bearer token is missing, wrong, expired or revoked.
    Unauthorized,
    /// 403: the token lacks the scope the request needs; the message names it.
    MissingScope,
    /// 404: no tool of that name is enabled.
    UnknownTool,
    /// 404: no route, artifact, snapshot, blob or process by that name.
    NotFound,
    /// 404: the file does not exist.
    FileNotFound,
    /// 404: no process started by that id, or the pid is not one of the server's processes.
    ProcessNotFound,
    /// 409: the process is not in a state for the request (it ended, its input is closed, it
    /// has no terminal, it is not a shell or its shell is busy), or its id names another one.
    ProcessConflict,
    /// 405: the route exists, not for this method.
    MethodNotAllowed,
    /// 400: a malformed request outside tool arguments.
    BadRequest,
    /// 403: the path leads outside the workspace.
    OutsideWorkspace,
    /// 403: a FIFO, socket, device or folder where a regular file was expected.
    NotARegularFile,
    /// 403: not a folder where one was expected.
    NotADirectory,
    /// 403: the file system refused.
    PermissionDenied,
    /// 403: a browser request from another site (an `Origin` that is not the server's), or a
    /// `Host` that is not the server's on a server without a token.
    ForeignOrigin,
    /// 415: a JSON route called without `Content-Type: application/json`.
    UnsupportedMediaType,
    /// 413: the body is over the limit, or the workspace (or one folder) holds more paths than
    /// a scan may (`--scan-max-entries`).
    PayloadTooLarge,
    /// 422: the arguments do not fit the tool's schema or its checks; the message names the field.
    InvalidArguments,
    /// 422: the file is not text.
    BinaryFile,
    /// 422: `search` does not occur in the file.
    NoMatch,
    /// 422: `search` occurs more than once.
    MultipleMatches,
    /// 409: the first request with this `Idempotency-Key` is still running; the message names
    /// its call id.
    IdempotencyInProgress,
    /// 422: this `Idempotency-Key` already names another request (method, path, query or body).
    IdempotencyKeyReused,
    /// 429: every call slot is busy; retry after `Retry-After`.
    Overloaded,
    /// 500: the command could not be started.
    SpawnFailed,
    /// 500: the file system failed.
    IoError,
    /// 500: a bug; the details are in the server's log.
    Internal,
    /// A type this client does not know (a newer server).
    #[serde(other, skip_serializing)]
    Unknown,
}

crate::serde_names!(ErrorType);

impl ErrorType {
    /// Whether an answer of this type (with this HTTP status) means the sandbox itself failed,
    /// rather than a request or a tool call's input being refused. Exhaustive on purpose: a new
    /// type must decide.
    pub fn is_infrastructure(self, status: u16) -> bool {
        match self {
            // A key clash is the client's bookkeeping, never a model's input.
            ErrorType::Unauthorized
            | ErrorType::MissingScope
            | ErrorType::Internal
            | ErrorType::IdempotencyInProgress
            | ErrorType::IdempotencyKeyReused => true,
            ErrorType::Unknown => status >= 500,
            ErrorType::UnknownTool
            | ErrorType::NotFound
            | ErrorType::FileNotFound
            | ErrorType::ProcessNotFound
            | ErrorType::ProcessConflict
            | ErrorType::MethodNotAllowed
            | ErrorType::BadRequest
            | ErrorType::OutsideWorkspace
            | ErrorType::NotARegularFile
            | ErrorType::NotADirectory
            | ErrorType::PermissionDenied
            | ErrorType::ForeignOrigin
            | ErrorType::UnsupportedMediaType
            | ErrorType::PayloadTooLarge
            | ErrorType::InvalidArguments
            | ErrorType::BinaryFile
            | ErrorType::NoMatch
            | ErrorType::MultipleMatches
            | ErrorType::Overloaded
            | ErrorType::SpawnFailed
            | ErrorType::IoError => false,
        }
    }
}

impl ErrorResponse {
    pub fn new(error_type: ErrorType, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse {
            error: ErrorBody {
                error_type,
                message: message.into(),
            },
        }
    }
}
