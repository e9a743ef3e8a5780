//! `ApiError`: every failure an HTTP answer can carry, mapped to a status and a stable type.
//!
//! The mapping is this file's one `match`; `sandbox_protocol::ErrorType` is the closed set of
//! types on the wire. A 5xx keeps its cause in the response's extensions, where
//! [`log_server_errors`] logs it once, with the request it answered; the client only reads
//! that the server failed.

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandbox_protocol::{ErrorResponse, ErrorType};

use crate::process::ProcessError;
use crate::sandbox::ToolError;
use crate::sandbox::archive::ArchiveError;
use crate::sandbox::snapshot::SnapshotError;
use crate::sandbox::workspace::WorkspaceError;

/// An error at the HTTP edge.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing, wrong, expired or revoked bearer token.
    #[error("{0}")]
    Unauthorized(String),
    /// The token lacks the scope the request needs (`None`: a route no minted token may call).
    #[error("{}", missing_scope(token, *scope, request))]
    MissingScope {
        token: String,
        scope: Option<sandbox_protocol::Scope>,
        request: String,
    },
    /// No tool of that name is enabled.
    #[error("{0}")]
    UnknownTool(String),
    /// No route, artifact or blob by that name.
    #[error("{0}")]
    NotFound(String),
    /// The route exists but not for this method.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The request body is over the configured limit.
    #[error("request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(u64),
    /// Every tool-call slot is taken.
    #[error("all {0} tool-call slots are busy; retry shortly")]
    Overloaded(usize),
    /// As many clients follow process output as the server takes.
    #[error("{0} clients already follow process output (--max-followers); retry shortly")]
    TooManyFollowers(usize),
    /// As many workspace archives are being written as the server writes at once.
    #[error(
        "{0} workspace archives are being written already (the most at once); retry when one ends"
    )]
    TooManyArchives(usize),
    /// The bytes of request bodies held at once are at their limit.
    #[error(
        "the server holds {0} bytes of request bodies already (--max-inflight-body-bytes); retry shortly"
    )]
    BodiesInFlight(u64),
    /// A browser request from another origin, or an unexpected `Host` without a token.
    #[error("{0}")]
    ForeignOrigin(String),
    /// A JSON route without a JSON content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A malformed request: a body that could not be read, a path parameter of the wrong type.
    #[error("{0}")]
    BadRequest(String),
    /// A query parameter or body that is well-formed but fails a check; the message names it.
    #[error("{0}")]
    InvalidArguments(String),
    /// A tool call failed (its arguments, its path, its process).
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A raw file or directory route refused the path or failed on it.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// A snapshot was unknown or could not be taken.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// An archive was refused, or replacing the workspace failed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A process could not be found or signalled.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A process started by id: unknown, or not in a state for the request.
    #[error(transparent)]
    Managed(#[from] crate::sandbox::processes::ManagedError),
    /// An `Idempotency-Key` already names another request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    /// The first request with this `Idempotency-Key` is still running.
    #[error("{0}")]
    IdempotencyInProgress(String),
    /// The server itself failed (a task panicked, a response could not be built).
    #[error("{0}")]
    Internal(String),
}

fn missing_scope(token: &str, scope: Option<sandbox_protocol::Scope>, request: &str) -> String {
    match scope {
        Some(scope) => {
            format!("token {token} lacks the `{scope}` scope, which {request} needs")
        }
        None => format!("{request} is open only to the server's own token, not to {token}"),
    }
}

/// The cause of a 5xx, carried to [`log_server_errors`] in the response's extensions.
#[derive(Debug, Clone)]
struct ServerErrorCause(String);

impl ApiError {
    /// A request body that could not be read: over the limit (413), or broken (400).
    pub(crate) fn from_body(
        rejection: &axum::extract::rejection::BytesRejection,
        limit: u64,
    ) -> ApiError {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::BadRequest(rejection.body_text())
        }
    }

    pub(crate) fn status_and_type(&self) -> (StatusCode, ErrorType) {
        match self {
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, ErrorType::Unauthorized),
            ApiError::MissingScope { .. } => (StatusCode::FORBIDDEN, ErrorType::MissingScope),
            ApiError::UnknownTool(_) => (StatusCode::NOT_FOUND, ErrorType::UnknownTool),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorType::NotFound),
            ApiError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorType::MethodNotAllowed)
            }
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
            }
            ApiError::Overloaded(_)
            | ApiError::TooManyFollowers(_)
            | ApiError::TooManyArchives(_)
            | ApiError::BodiesInFlight(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorType::Overloaded),
            ApiError::ForeignOrigin(_) => (StatusCode::FORBIDDEN, ErrorType::ForeignOrigin),
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorType::UnsupportedMediaType,
            ),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, ErrorType::BadRequest),
            ApiError::InvalidArguments(_) => invalid_arguments(),
            ApiError::Tool(err) => tool_status(err),
            ApiError::Managed(err) => managed_status(err),
            ApiError::Workspace(err) => workspace_status(err),
            ApiError::Snapshot(SnapshotError::Unknown(_)) => {
                (StatusCode::NOT_FOUND, ErrorType::NotFound)
            }
            // Past `--scan-max-entries`: a 4xx, so the message (limit, flag, count) is shown.
            ApiError::Snapshot(SnapshotError::TooManyPaths(_)) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
            }
            ApiError::Snapshot(SnapshotError::Io(_)) => {
                (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::IoError)
            }
            ApiError::Archive(ArchiveError::Invalid(err))
                if err.kind() == std::io::ErrorKind::FileTooLarge =>
            {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
            }
            ApiError::Archive(ArchiveError::TooLarge(_)) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
            }
            ApiError::Archive(ArchiveError::Invalid(_)) => invalid_arguments(),
            ApiError::Archive(ArchiveError::Io(_)) => {
                (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::IoError)
            }
            ApiError::Process(err) => process_status(err),
            ApiError::IdempotencyKeyReused(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorType::IdempotencyKeyReused,
            ),
            ApiError::IdempotencyInProgress(_) => {
                (StatusCode::CONFLICT, ErrorType::IdempotencyInProgress)
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::Internal),
        }
    }
}

fn invalid_arguments() -> (StatusCode, ErrorType) {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        ErrorType::InvalidArguments,
    )
}

pub(crate) fn tool_status(err: &ToolError) -> (StatusCode, ErrorType) {
    match err {
        ToolError::InvalidArguments(_) => invalid_arguments(),
        ToolError::Workspace(err) => workspace_status(err),
        ToolError::BinaryFile(_) => (StatusCode::UNPROCESSABLE_ENTITY, ErrorType::BinaryFile),
        ToolError::MatchCount { count: 0, .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, ErrorType::NoMatch)
        }
        ToolError::MatchCount { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, ErrorType::MultipleMatches)
        }
        ToolError::Process(err) => process_status(err),
        ToolError::Managed(err) => managed_status(err),
        ToolError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::Internal),
    }
}

fn workspace_status(err: &WorkspaceError) -> (StatusCode, ErrorType) {
    match err {
        WorkspaceError::OutsideWorkspace { .. } => {
            (StatusCode::FORBIDDEN, ErrorType::OutsideWorkspace)
        }
        WorkspaceError::NotRegularFile { .. } => {
            (StatusCode::FORBIDDEN, ErrorType::NotARegularFile)
        }
        WorkspaceError::NotADirectory { .. } => (StatusCode::FORBIDDEN, ErrorType::NotADirectory),
        WorkspaceError::TooManyEntries { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
        }
        WorkspaceError::PermissionDenied { .. } => {
            (StatusCode::FORBIDDEN, ErrorType::PermissionDenied)
        }
        WorkspaceError::NotFound { .. } => (StatusCode::NOT_FOUND, ErrorType::FileNotFound),
        WorkspaceError::InvalidPath(_) => invalid_arguments(),
        WorkspaceError::Io { source, .. } if source.kind() == std::io::ErrorKind::FileTooLarge => {
            (StatusCode::PAYLOAD_TOO_LARGE, ErrorType::PayloadTooLarge)
        }
        WorkspaceError::Io { .. } => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::IoError),
    }
}

fn managed_status(err: &crate::sandbox::processes::ManagedError) -> (StatusCode, ErrorType) {
    use crate::sandbox::processes::ManagedError;
    match err {
        ManagedError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorType::ProcessNotFound),
        ManagedError::Conflict(_) => (StatusCode::CONFLICT, ErrorType::ProcessConflict),
        ManagedError::Invalid(_) => invalid_arguments(),
        ManagedError::Workspace(err) => workspace_status(err),
        ManagedError::Spawn(err) => process_status(err),
    }
}

fn process_status(err: &ProcessError) -> (StatusCode, ErrorType) {
    match err {
        ProcessError::Spawn { .. } => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::SpawnFailed),
        ProcessError::NotOurs(_) => (StatusCode::NOT_FOUND, ErrorType::ProcessNotFound),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error_type) = self.status_and_type();
        let message = if status.is_server_error() {
            // The details are for the server's log, not the client.
            "internal error; see the server log".to_owned()
        } else {
            self.to_string()
        };
        let mut response = (status, Json(ErrorResponse::new(error_type, message))).into_response();
        // For the metrics (`observe`): errors by type.
        response.extensions_mut().insert(error_type);
        let headers = response.headers_mut();
        match self {
            ApiError::Overloaded(_)
            | ApiError::TooManyFollowers(_)
            | ApiError::TooManyArchives(_)
            | ApiError::BodiesInFlight(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ if status.is_server_error() => {
                response
                    .extensions_mut()
                    .insert(ServerErrorCause(format!("{error_type:?}: {self}")));
            }
            _ => {}
        }
        response
    }
}

/// Logs every 5xx once, with its cause and the request it answered: a 5xx means the server is
/// broken, and is worth a line in its log.
pub(crate) async fn log_server_errors(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    if response.status().is_server_error() {
        let cause = response
            .extensions()
            .get::<ServerErrorCause>()
            .map_or("no cause recorded", |cause| cause.0.as_str());
        tracing::error!(%method, path, status = response.status().as_u16(), cause, "request failed");
    }
    response
}

/// An error answer that is not our JSON body (an extractor's rejection: a query or path
/// parameter that does not parse, a duplicate query key) becomes one, with the type its status
/// means and the rejection's text as the message: every 4xx and 5xx has the documented body.
pub(crate) async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Rejection texts are short; anything longer is cut.
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let error_type = match status {
        StatusCode::NOT_FOUND => ErrorType::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorType::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorType::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorType::UnsupportedMediaType,
        StatusCode::UNPROCESSABLE_ENTITY => ErrorType::InvalidArguments,
        StatusCode::UNAUTHORIZED => ErrorType::Unauthorized,
        StatusCode::TOO_MANY_REQUESTS => ErrorType::Overloaded,
        s if s.is_server_error() => ErrorType::Internal,
        _ => ErrorType::BadRequest,
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let body = serde_json::to_vec(&ErrorResponse::new(error_type, message)).unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.extensions.insert(error_type);
    Response::from_parts(parts, axum::body::Body::from(body))
}
