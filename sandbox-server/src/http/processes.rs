//! Processes: the ones started by id (start, read, write, signal, resize, delete), persistent
//! shells, and the operating-system processes every command leaves (list, kill).

use std::sync::Arc;
use std::time::Duration;

use super::extract::{JsonBody, PathParam, QueryArgs};
use super::{ApiError, AppState};
use crate::sandbox::blocking;
use crate::sandbox::processes::{self, Managed, ManagedError};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sandbox_protocol::{
    ErrorResponse, ManagedProcess, ProcessKillResponse, ProcessListResponse, ProcessOutput,
    ShellRunRequest, ShellRunResult, SignalRequest, StartProcessRequest, StartShellRequest,
    StdinRequest, StdinResponse, TtySize,
};

/// Every live process the server started: commands still running and the background
/// processes that commands left behind (`sleep 100 &`). All are killed when the server stops.
#[utoipa::path(
    get, path = "/v1/processes", tag = "processes",
    responses(
        (status = 200, body = ProcessListResponse),
    ),
)]
pub(crate) async fn list_processes(
    State(state): State<AppState>,
) -> Result<Json<ProcessListResponse>, ApiError> {
    let supervisor = state.ctx.supervisor.clone();
    let processes = blocking(move || supervisor.process_infos()).await?;
    let managed = state.ctx.processes.list();
    Ok(Json(ProcessListResponse { processes, managed }))
}

/// Which processes `DELETE /v1/processes` ends.
#[derive(Debug, Clone, Copy, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct KillQuery {
    /// Also the processes of calls still running (which then end as killed): everything
    /// but the image's own entrypoint.
    #[serde(default)]
    include_running: bool,
}

/// Ends every background process (those no running call owns; with `include_running`, those
/// of running calls too), and their descendants: SIGTERM, then SIGKILL after the kill grace
/// period, repeated until none is left. The image's own entrypoint (`--entrypoint-process`)
/// and what it started are the task's and are left running.
#[utoipa::path(
    delete, path = "/v1/processes", tag = "processes",
    params(KillQuery),
    responses(
        (status = 200, body = ProcessKillResponse),
        (status = 422, description = "A query parameter fails its check", body = ErrorResponse),
    ),
)]
pub(crate) async fn kill_background(
    State(state): State<AppState>,
    QueryArgs(query): QueryArgs<KillQuery>,
) -> Result<Json<ProcessKillResponse>, ApiError> {
    let grace = Duration::from_millis(state.ctx.limits.kill_grace_ms);
    let report = if query.include_running {
        state.ctx.supervisor.kill_unprotected(grace).await
    } else {
        state.ctx.supervisor.kill_background(grace).await
    };
    Ok(Json(kill_response(report)))
}

fn kill_response(report: crate::process::KillReport) -> ProcessKillResponse {
    ProcessKillResponse {
        killed: report.killed,
        forced: report.forced,
        commands: report.commands,
    }
}

/// Starts a command under an id of the client's choosing, with the same containment as
/// `bash`. Its output is kept in a numbered buffer: read it with `GET …/output` (long-poll),
/// `GET …/events` (Server-Sent Events) or `GET …/pty` (WebSocket). It runs until it ends, its
/// `timeout` fires or it is deleted; no client's connection ends it. Repeating a start with the
/// same id and body answers 200 with the process as it is.
#[utoipa::path(
    post, path = "/v1/processes", tag = "processes",
    request_body = StartProcessRequest,
    responses(
        (status = 201, description = "Started", body = ManagedProcess),
        (status = 200, description = "A repeat of the request that started it", body = ManagedProcess),
        (status = 403, description = "`cwd` leads outside the workspace or is not a folder", body = ErrorResponse),
        (status = 404, description = "`cwd` does not exist (`file_not_found`)", body = ErrorResponse),
        (status = 409, description = "The id names another process, or the table is full of running ones (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "A field fails its check; the message names it", body = ErrorResponse),
    ),
)]
pub(crate) async fn start_process(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<StartProcessRequest>,
) -> Result<(StatusCode, Json<ManagedProcess>), ApiError> {
    Ok(created(state.ctx.processes.start(&request)?))
}

/// A process started by id, as it is now.
#[utoipa::path(
    get, path = "/v1/processes/{id}", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with")),
    responses(
        (status = 200, body = ManagedProcess),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_process(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<ManagedProcess>, ApiError> {
    Ok(Json(state.ctx.processes.get(&id)?.describe()))
}

/// Ends a process and everything it started (SIGTERM, then SIGKILL after the kill grace):
/// one started by id, which is then forgotten, or an operating-system process by its pid
/// (from `GET /v1/processes`).
#[utoipa::path(
    delete, path = "/v1/processes/{id}", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with, or a pid")),
    responses(
        (status = 200, body = ProcessKillResponse),
        (status = 404, description = "No process by that id, and no live process with that pid started by this server (`process_not_found`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn delete_process(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<Json<ProcessKillResponse>, ApiError> {
    if state.ctx.processes.contains(&id) {
        let (_, report) = state.ctx.processes.delete(&id).await?;
        return Ok(Json(kill_response(report)));
    }
    let Ok(pid) = id.parse::<u32>() else {
        return Err(ManagedError::NotFound(id).into());
    };
    let grace = Duration::from_millis(state.ctx.limits.kill_grace_ms);
    let supervisor = state.ctx.supervisor.clone();
    let host = blocking(move || supervisor.host_pid(pid)).await?;
    let report = match host {
        Some(host) => state.ctx.supervisor.kill_tree(host, grace).await?,
        None => return Err(crate::process::ProcessError::NotOurs(pid).into()),
    };
    Ok(Json(kill_response(report)))
}

/// Where a read starts and how long it may wait.
#[derive(Debug, Clone, Copy, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct OutputQuery {
    /// The last chunk already seen (0: from the start).
    #[serde(default)]
    #[param(minimum = 0)]
    after_seq: u64,
    /// How long to wait for something new, in milliseconds (at most 60000); 0 answers at once.
    #[serde(default)]
    #[param(minimum = 0, maximum = 60000)]
    wait_ms: u64,
    /// About how many bytes of output to return (at least one chunk when there is one).
    #[serde(default = "default_max_bytes")]
    #[param(minimum = 1, maximum = 16777216)]
    max_bytes: u64,
}

fn default_max_bytes() -> u64 {
    1024 * 1024
}

/// The output after `after_seq`, waiting up to `wait_ms` for some when there is none yet
/// (long-poll). `dropped` tells what left the buffer before this reader got it; `done` that
/// the process ended and nothing more will come. Pass `next_after_seq` to the next read.
#[utoipa::path(
    get, path = "/v1/processes/{id}/output", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with"), OutputQuery),
    responses(
        (status = 200, body = ProcessOutput),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 422, description = "A query parameter fails its check", body = ErrorResponse),
        (status = 429, description = "With `wait_ms`: as many clients follow process output as the server takes (`--max-followers`; `overloaded`, with Retry-After)", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_output(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    QueryArgs(query): QueryArgs<OutputQuery>,
) -> Result<Json<ProcessOutput>, ApiError> {
    super::streams::check_cursor(query.after_seq)?;
    if query.wait_ms > 60_000 || query.max_bytes == 0 || query.max_bytes > 16 * 1024 * 1024 {
        return Err(ApiError::InvalidArguments(
            "wait_ms must be at most 60000 and max_bytes 1 to 16777216".to_owned(),
        ));
    }
    let managed = state.ctx.processes.get(&id)?;
    // A read that waits is a follower while it waits.
    let _permit = match query.wait_ms {
        0 => None,
        _ => Some(super::streams::follower_permit(&state)?),
    };
    let output = managed
        .read_waiting(
            query.after_seq,
            query.max_bytes as usize,
            Duration::from_millis(query.wait_ms),
        )
        .await;
    Ok(Json(output))
}

/// Writes to a process's standard input (typed input for a `tty` process); `close` then ends
/// it (Ctrl-D on a terminal).
#[utoipa::path(
    post, path = "/v1/processes/{id}/stdin", tag = "processes", operation_id = "process_stdin",
    params(("id" = String, Path, description = "The id it was started with")),
    request_body = StdinRequest,
    responses(
        (status = 200, body = StdinResponse),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 409, description = "It has ended, its input is closed, or it is a shell (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "A field fails its check; the message names it", body = ErrorResponse),
    ),
)]
pub(crate) async fn write_stdin(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<StdinRequest>,
) -> Result<Json<StdinResponse>, ApiError> {
    let bytes = processes::decode_input(&request.data, request.encoding)?;
    let managed = state.ctx.processes.get(&id)?;
    let stdin_open = managed.write_stdin(&bytes, request.close).await?;
    Ok(Json(StdinResponse {
        written: bytes.len() as u64,
        stdin_open,
    }))
}

/// Sends a signal to a process's foreground: the terminal's foreground process group for a
/// `tty` process (what Ctrl-C reaches), its own process group otherwise.
#[utoipa::path(
    post, path = "/v1/processes/{id}/signal", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with")),
    request_body = SignalRequest,
    responses(
        (status = 204, description = "Sent"),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 409, description = "It has ended (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "Not a signal this server sends", body = ErrorResponse),
    ),
)]
pub(crate) async fn send_signal(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    state.ctx.processes.get(&id)?.signal(request.signal)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resizes a `tty` process's terminal; its programs get SIGWINCH.
#[utoipa::path(
    post, path = "/v1/processes/{id}/resize", tag = "processes",
    params(("id" = String, Path, description = "The id it was started with")),
    request_body = TtySize,
    responses(
        (status = 204, description = "Resized"),
        (status = 404, description = "No process by that id (`process_not_found`)", body = ErrorResponse),
        (status = 409, description = "It has ended, or has no terminal (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "A size outside 1 to 1000", body = ErrorResponse),
    ),
)]
pub(crate) async fn resize(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    JsonBody(size): JsonBody<TtySize>,
) -> Result<StatusCode, ApiError> {
    state.ctx.processes.get(&id)?.resize(size)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Starts a persistent shell: `bash` that takes one command at a time
/// (`POST /v1/shells/{id}/run`) and keeps its working directory, variables and functions
/// between them. It is a process like the others: listed, read and deleted under
/// `/v1/processes/{id}`.
#[utoipa::path(
    post, path = "/v1/shells", tag = "processes",
    request_body = StartShellRequest,
    responses(
        (status = 201, description = "Started", body = ManagedProcess),
        (status = 200, description = "A repeat of the request that started it", body = ManagedProcess),
        (status = 403, description = "`cwd` leads outside the workspace or is not a folder", body = ErrorResponse),
        (status = 404, description = "`cwd` does not exist (`file_not_found`)", body = ErrorResponse),
        (status = 409, description = "The id names another process (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "A field fails its check; the message names it", body = ErrorResponse),
    ),
)]
pub(crate) async fn start_shell(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<StartShellRequest>,
) -> Result<(StatusCode, Json<ManagedProcess>), ApiError> {
    Ok(created(state.ctx.processes.start_shell(&request).await?))
}

/// 201 with the process when the request started it, 200 when it repeated the request that did.
fn created((managed, started): (Arc<Managed>, bool)) -> (StatusCode, Json<ManagedProcess>) {
    let status = if started {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(managed.describe()))
}

/// Runs one command in the shell and answers when it has ended, as `bash` does (its own
/// stdout, stderr and exit code). At its timeout the command is interrupted as by Ctrl-C and
/// the shell lives on. One command at a time per shell.
#[utoipa::path(
    post, path = "/v1/shells/{id}/run", tag = "processes",
    params(("id" = String, Path, description = "The shell's id")),
    request_body = ShellRunRequest,
    responses(
        (status = 200, body = ShellRunResult),
        (status = 404, description = "No shell by that id (`process_not_found`)", body = ErrorResponse),
        (status = 409, description = "Not a shell, ended, or running another command (`process_conflict`)", body = ErrorResponse),
        (status = 422, description = "A field fails its check; the message names it", body = ErrorResponse),
    ),
)]
pub(crate) async fn run_in_shell(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<ShellRunRequest>,
) -> Result<Json<ShellRunResult>, ApiError> {
    let limits = &state.ctx.limits;
    let timeout = request.timeout.unwrap_or(limits.default_timeout_secs);
    if timeout == 0 || timeout > limits.max_timeout_secs {
        return Err(ApiError::InvalidArguments(format!(
            "timeout: {timeout} is outside 1 to {} seconds",
            limits.max_timeout_secs
        )));
    }
    let managed = state.ctx.processes.get(&id)?;
    let result = processes::shell::run(
        &state.ctx.processes,
        &managed,
        &request.cmd,
        timeout,
        &state.ctx,
    )
    .await?;
    Ok(Json(result))
}

/// Interrupts the shell's running command as Ctrl-C would; the shell lives on.
#[utoipa::path(
    post, path = "/v1/shells/{id}/interrupt", tag = "processes",
    params(("id" = String, Path, description = "The shell's id")),
    responses(
        (status = 204, description = "Interrupted"),
        (status = 404, description = "No shell by that id (`process_not_found`)", body = ErrorResponse),
        (status = 409, description = "Not a shell, or not running a command (`process_conflict`)", body = ErrorResponse),
    ),
)]
pub(crate) async fn interrupt_shell(
    State(state): State<AppState>,
    PathParam(id): PathParam<String>,
) -> Result<StatusCode, ApiError> {
    let managed = state.ctx.processes.get(&id)?;
    let Some(shell) = &managed.shell else {
        return Err(ManagedError::Conflict(format!("`{id}` is not a shell")).into());
    };
    shell.interrupt(&managed)?;
    Ok(StatusCode::NO_CONTENT)
}
