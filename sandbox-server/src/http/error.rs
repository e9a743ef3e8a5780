//! `ApiError`: every failure an HTTP answer can carry, mapped to a status and a stable type.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::ErrorResponse;

use crate::process::ProcessError;
use crate::sandbox::ToolError;
use crate::sandbox::workspace::WorkspaceError;

/// An error at the HTTP edge.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong bearer token.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// No tool of that name is enabled.
    #[error("{0}")]
    UnknownTool(String),
    /// No route, artifact or process by that name.
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
    /// A malformed request outside tool arguments (a bad path parameter).
    #[error("{0}")]
    BadRequest(String),
    /// The tool failed.
    #[error(transparent)]
    Tool(#[from] ToolError),
}

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

    fn status_and_type(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::UnknownTool(_) => (StatusCode::NOT_FOUND, "unknown_tool"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Tool(err) => tool_status(err),
        }
    }
}

fn tool_status(err: &ToolError) -> (StatusCode, &'static str) {
    match err {
        ToolError::InvalidArguments(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_arguments"),
        ToolError::Workspace(err) => match err {
            WorkspaceError::OutsideWorkspace { .. } => (StatusCode::FORBIDDEN, "outside_workspace"),
            WorkspaceError::NotRegularFile { .. } => (StatusCode::FORBIDDEN, "not_a_regular_file"),
            WorkspaceError::NotADirectory { .. } => (StatusCode::FORBIDDEN, "not_a_directory"),
            WorkspaceError::PermissionDenied { .. } => (StatusCode::FORBIDDEN, "permission_denied"),
            WorkspaceError::NotFound { .. } => (StatusCode::NOT_FOUND, "file_not_found"),
            WorkspaceError::InvalidPath(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_arguments")
            }
            WorkspaceError::Io { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "io_error"),
        },
        ToolError::BinaryFile(_) => (StatusCode::UNPROCESSABLE_ENTITY, "binary_file"),
        ToolError::MatchCount { count: 0, .. } => (StatusCode::UNPROCESSABLE_ENTITY, "no_match"),
        ToolError::MatchCount { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "multiple_matches"),
        ToolError::Process(ProcessError::Spawn { .. }) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "spawn_failed")
        }
        ToolError::Process(ProcessError::NotOurs(_)) => {
            (StatusCode::NOT_FOUND, "process_not_found")
        }
        ToolError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error_type) = self.status_and_type();
        let message = match &self {
            // Internal details go to the log (by the trace layer's failure hook), not the client.
            ApiError::Tool(ToolError::Internal(_)) => {
                "internal error; see the server log".to_owned()
            }
            other => other.to_string(),
        };
        if status.is_server_error() {
            tracing::error!(error_type, cause = %self, "request failed");
        }
        let mut response = (status, Json(ErrorResponse::new(error_type, message))).into_response();
        if let ApiError::Overloaded(_) = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::Unauthorized(_) = self {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
