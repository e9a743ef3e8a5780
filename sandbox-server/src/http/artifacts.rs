//! The full output of a command stream, with `Range` support.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::ErrorResponse;
use tower::ServiceExt;
use tower_http::services::ServeFile;

use super::{ApiError, AppState};
use crate::sandbox::output::StoredArtifact;

/// The bytes of an artifact named in a `bash` result. Supports `Range: bytes=…` (206) for
/// reading a large output in parts.
#[utoipa::path(
    get, path = "/v1/artifacts/{id}", tag = "artifacts",
    params(("id" = String, Path, description = "`stdout_artifact.id` or `stderr_artifact.id` of a bash result")),
    responses(
        (status = 200, description = "The whole artifact", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The requested range", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, description = "No such artifact, or evicted", body = ErrorResponse),
        (status = 416, description = "The range is outside the artifact"),
    ),
)]
pub(crate) async fn get_artifact(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    // A short artifact still in memory is written to its file first, so that byte ranges are
    // served by one code path.
    let artifacts = state.ctx.artifacts.clone();
    let lookup = id.clone();
    let stored = crate::sandbox::blocking(move || artifacts.file(&lookup))
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no artifact `{id}` (unknown, or evicted past the retention budget)"
            ))
        })?
        .map_err(|err| ApiError::Internal(format!("writing artifact `{id}` to its file: {err}")))?;
    let path = match stored {
        StoredArtifact::File(path) => path,
        StoredArtifact::Empty => return Ok(empty_artifact(&request)),
        StoredArtifact::Memory(_) => {
            return Err(ApiError::Internal(format!(
                "artifact `{id}` is still in memory after being written out"
            )));
        }
    };
    let response = ServeFile::new(path)
        .oneshot(request)
        .await
        .map_err(|err| ApiError::NotFound(format!("artifact `{id}`: {err}")))?;
    Ok(response.into_response())
}

/// A stream that printed nothing: an empty body, and 416 for any range (none is satisfiable).
fn empty_artifact(request: &Request) -> Response {
    let status = if request.headers().contains_key(header::RANGE) {
        StatusCode::RANGE_NOT_SATISFIABLE
    } else {
        StatusCode::OK
    };
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    if status == StatusCode::RANGE_NOT_SATISFIABLE {
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            header::HeaderValue::from_static("bytes */0"),
        );
    }
    response
}
