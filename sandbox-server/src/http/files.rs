//! Raw files and directory listings, within the same workspace boundary as the file tools.
//! For seeding a workspace, reading context files (AGENTS.md, skills) and fetching results.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::{DirListing, ErrorResponse, FilePutResponse, PathInfo};
use serde::Deserialize;
use tokio_util::io::ReaderStream;
use utoipa::IntoParams;

use super::{ApiError, AppState};
use crate::sandbox::blocking;

/// The bytes of a regular file in the workspace.
#[utoipa::path(
    get, path = "/v1/files/{path}", tag = "files",
    params(("path" = String, Path, description = "Path relative to the workspace root; may contain `/`")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 403, description = "Outside the workspace, or not a regular file", body = ErrorResponse),
        (status = 404, description = "No such file", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_file(
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Response, ApiError> {
    let workspace = state.ctx.workspace.clone();
    let (file, size) = blocking(move || workspace.open_regular(&path)).await??;
    let body = Body::from_stream(ReaderStream::new(tokio::fs::File::from_std(file)));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    Ok(response)
}

/// The set-user-id and set-group-id bits, never set by an upload.
const SET_ID: u32 = 0o6000;

/// Query of `PUT /v1/files/{path}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PutQuery {
    /// Permission bits in octal, for example `0755`; an existing file keeps its own when absent.
    /// Set-user-id and set-group-id bits are left out (the answer's `notes` says so).
    #[param(pattern = "^[0-7]{3,4}$")]
    mode: Option<String>,
}

/// Replaces (or creates) a file with the request body, atomically; creates missing folders.
#[utoipa::path(
    put, path = "/v1/files/{path}", tag = "files",
    params(("path" = String, Path, description = "Path relative to the workspace root; may contain `/`"), PutQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The file's new bytes; no body makes an empty file"),
    responses(
        (status = 200, description = "Replaced", body = FilePutResponse),
        (status = 201, description = "Created", body = FilePutResponse),
        (status = 403, description = "Outside the workspace, or not a regular file", body = ErrorResponse),
        (status = 413, description = "Body over the limit", body = ErrorResponse),
        (status = 422, description = "Bad mode (three or four octal digits), or a bad path", body = ErrorResponse),
    ),
)]
pub(crate) async fn put_file(
    State(state): State<AppState>,
    Path(path): Path<String>,
    Query(query): Query<PutQuery>,
    body: Body,
) -> Result<Response, ApiError> {
    let mode = match query.mode.as_deref() {
        None => None,
        Some(text) => Some(
            Some(text)
                .filter(|t| {
                    (3..=4).contains(&t.len()) && t.bytes().all(|b| matches!(b, b'0'..=b'7'))
                })
                .and_then(|t| u32::from_str_radix(t, 8).ok())
                .filter(|bits| *bits <= 0o7777)
                .ok_or_else(|| {
                    ApiError::InvalidArguments(format!(
                        "mode: expected octal permission bits such as 0644, got `{text}`"
                    ))
                })?,
        ),
    };
    let mut notes = Vec::new();
    let mode = mode.map(|bits| {
        if bits & SET_ID != 0 {
            notes.push(format!(
                "mode {bits:04o}: the set-user-id and set-group-id bits were left out (set {:04o}): no file where commands run is set-id",
                bits & !SET_ID
            ));
        }
        bits & !SET_ID
    });
    // Streamed to a temporary file beside the target: the body is never held whole.
    let reader = super::body::stream(body, state.limits.max_body_bytes);
    let workspace = state.ctx.workspace.clone();
    let target = path.clone();
    let (outcome, n_bytes) =
        blocking(move || workspace.write_atomic_from(&target, reader, mode)).await??;
    let status = if outcome.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = FilePutResponse {
        path,
        bytes_written: n_bytes,
        created: outcome.created,
        notes,
    };
    Ok((status, Json(answer)).into_response())
}

/// The entries of the workspace root, sorted by name.
#[utoipa::path(
    get, path = "/v1/dirs", tag = "files",
    responses(
        (status = 200, body = DirListing),
        (status = 413, description = "The folder holds more entries than a listing may (`--scan-max-entries`; `payload_too_large`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn list_root(state: State<AppState>) -> Result<Json<DirListing>, ApiError> {
    list_dir(state, Path(".".to_owned())).await
}

/// The entries of a directory in the workspace, sorted by name.
#[utoipa::path(
    get, path = "/v1/dirs/{path}", tag = "files",
    params(("path" = String, Path, description = "Path relative to the workspace root")),
    responses(
        (status = 200, body = DirListing),
        (status = 403, description = "Outside the workspace, or not a directory", body = ErrorResponse),
        (status = 404, description = "No such directory", body = ErrorResponse),
        (status = 413, description = "The folder holds more entries than a listing may (`--scan-max-entries`; `payload_too_large`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn list_dir(
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Json<DirListing>, ApiError> {
    let workspace = state.ctx.workspace.clone();
    let target = path.clone();
    let max_entries = state.limits.scan_max_entries;
    let entries = blocking(move || workspace.list_dir(&target, max_entries)).await??;
    Ok(Json(DirListing { path, entries }))
}

/// Where a path leads, its symlinks followed as the file tools follow them: told, not refused,
/// when one leads out of the workspace (what a command reading the path would read).
#[utoipa::path(
    get, path = "/v1/paths/{path}", tag = "files",
    params(("path" = String, Path, description = "Path relative to the workspace root; may contain `/`")),
    responses(
        (status = 200, body = PathInfo),
        (status = 422, description = "A bad path (empty, or a NUL byte)", body = ErrorResponse),
    ),
)]
pub(crate) async fn trace_path(
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Json<PathInfo>, ApiError> {
    let workspace = state.ctx.workspace.clone();
    let target = path.clone();
    let traced = blocking(move || workspace.trace(&target)).await??;
    Ok(Json(PathInfo {
        path,
        kind: traced.kind,
        leads_to: traced.leads_to,
    }))
}
