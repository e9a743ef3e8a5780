//! The full output of a command stream, with `Range` support.

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::ErrorResponse;
use tower::ServiceExt;
use tower_http::services::ServeFile;

use super::{ApiError, AppState};

/// The bytes of an artifact named in a `bash` result. Supports `Range: bytes=…` (206) for
/// reading a large output in parts.
#[utoipa::path(
    get, path = "/v1/artifacts/{id}", tag = "artifacts",
    params(("id" = String, Path, description = "`stdout_artifact.id` or `stderr_artifact.id` of a bash result")),
    responses(
        (status = 200, description = "The whole artifact", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The requested range", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 401, description = "Missing or wrong token", body = ErrorResponse),
        (status = 404, description = "No such artifact, or evicted", body = ErrorResponse),
        (status = 416, description = "The range is outside the artifact"),
    ),
)]
pub(crate) async fn get_artifact(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let path = state.ctx.artifacts.path(&id).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no artifact `{id}` (unknown, or evicted past the retention budget)"
        ))
    })?;
    let response = ServeFile::new(path)
        .oneshot(request)
        .await
        .map_err(|err| ApiError::NotFound(format!("artifact `{id}`: {err}")))?;
    Ok(response.into_response())
}
