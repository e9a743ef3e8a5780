//! Background processes: list them, end one.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use sandbox_protocol::{ErrorResponse, ProcessInfo, ProcessKillResponse, ProcessListResponse};

use super::{ApiError, AppState};
use crate::process::{self, ProcessError, Supervisor};
use crate::time::rfc3339;

/// Every live process the server started: commands still running and the background
/// processes that commands left behind (`sleep 100 &`). All are killed when the server stops.
#[utoipa::path(
    get, path = "/v1/processes", tag = "processes",
    responses(
        (status = 200, body = ProcessListResponse),
        (status = 401, description = "Missing or wrong token", body = ErrorResponse),
    ),
)]
pub(crate) async fn list_processes(State(state): State<AppState>) -> Json<ProcessListResponse> {
    let supervisor = state.ctx.supervisor.clone();
    let processes = tokio::task::spawn_blocking(move || process_infos(&supervisor))
        .await
        .unwrap_or_default();
    Json(ProcessListResponse { processes })
}

/// The live processes the server started, as the wire describes them. Blocking: reads `/proc`.
pub(crate) fn process_infos(supervisor: &Supervisor) -> Vec<ProcessInfo> {
    supervisor
        .live_processes()
        .into_iter()
        .map(|(entry, call_id)| ProcessInfo {
            pid: entry.pid,
            ppid: entry.ppid,
            pgid: entry.pgid,
            command: process::command_line(entry.pid),
            started_at: process::start_time_unix(entry.start_ticks)
                .map(rfc3339)
                .unwrap_or_default(),
            foreground: call_id
                .as_deref()
                .is_some_and(|id| supervisor.is_call_running(id)),
            call_id,
        })
        .collect()
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
        (status = 404, description = "Not a live process started by this server", body = ErrorResponse),
    ),
)]
pub(crate) async fn kill_process(
    State(state): State<AppState>,
    pid: Result<Path<u32>, PathRejection>,
) -> Result<Json<ProcessKillResponse>, ApiError> {
    let Path(pid) =
        pid.map_err(|rejection| ApiError::BadRequest(format!("pid: {}", rejection.body_text())))?;
    let grace = Duration::from_millis(state.ctx.limits.kill_grace_ms);
    let report = state
        .ctx
        .supervisor
        .kill_tree(pid, grace)
        .await
        .map_err(|err| match err {
            ProcessError::NotOurs(_) => ApiError::NotFound(err.to_string()),
            other @ ProcessError::Spawn { .. } => ApiError::Tool(other.into()),
        })?;
    Ok(Json(ProcessKillResponse {
        killed: report.killed,
        forced: report.forced,
    }))
}
