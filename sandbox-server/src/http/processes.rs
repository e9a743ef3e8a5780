//! Background processes: list them, end one.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use sandbox_protocol::{ErrorResponse, ProcessKillResponse, ProcessListResponse};

use super::{ApiError, AppState};
use crate::sandbox::blocking;

/// Every live process the server started: commands still running and the background
/// processes that commands left behind (`sleep 100 &`). All are killed when the server stops.
#[utoipa::path(
    get, path = "/v1/processes", tag = "processes",
    responses(
        (status = 200, body = ProcessListResponse),
        (status = 401, description = "Missing or wrong token", body = ErrorResponse),
    ),
)]
pub(crate) async fn list_processes(
    State(state): State<AppState>,
) -> Result<Json<ProcessListResponse>, ApiError> {
    let supervisor = state.ctx.supervisor.clone();
    let processes = blocking(move || supervisor.process_infos()).await?;
    Ok(Json(ProcessListResponse { processes }))
}

/// Ends every background process (those no running call owns), and their descendants:
/// SIGTERM, then SIGKILL after the kill grace period, repeated until none is left.
#[utoipa::path(
    delete, path = "/v1/processes", tag = "processes",
    responses(
        (status = 200, body = ProcessKillResponse),
        (status = 401, description = "Missing or wrong token", body = ErrorResponse),
    ),
)]
pub(crate) async fn kill_background(State(state): State<AppState>) -> Json<ProcessKillResponse> {
    let grace = Duration::from_millis(state.ctx.limits.kill_grace_ms);
    let report = state.ctx.supervisor.kill_background(grace).await;
    Json(ProcessKillResponse {
        killed: report.killed,
        forced: report.forced,
    })
}

/// Ends a process the server started, and its descendants: SIGTERM, then SIGKILL after the
/// kill grace period.
#[utoipa::path(
    delete, path = "/v1/processes/{pid}", tag = "processes",
    params(("pid" = u32, Path, description = "A pid from `GET /v1/processes`")),
    responses(
        (status = 200, body = ProcessKillResponse),
        (status = 400, description = "The pid is not a number", body = ErrorResponse),
        (status = 401, description = "Missing or wrong token", body = ErrorResponse),
        (status = 404, description = "Not a live process started by this server (`process_not_found`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn kill_process(
    State(state): State<AppState>,
    pid: Result<Path<u32>, PathRejection>,
) -> Result<Json<ProcessKillResponse>, ApiError> {
    let Path(pid) =
        pid.map_err(|rejection| ApiError::BadRequest(format!("pid: {}", rejection.body_text())))?;
    let grace = Duration::from_millis(state.ctx.limits.kill_grace_ms);
    let report = state.ctx.supervisor.kill_tree(pid, grace).await?;
    Ok(Json(ProcessKillResponse {
        killed: report.killed,
        forced: report.forced,
    }))
}
