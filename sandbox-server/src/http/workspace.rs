//! Workspace state: snapshots, changes, blobs, the archive, and the state fingerprint.

mod stream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use sandbox_protocol::{
    ArchivePutResponse, ChangesResponse, EntryKind, ErrorResponse, FingerprintResponse,
    ManifestResponse, ResetResponse, SnapshotResponse,
};
use serde::Deserialize;
use tower::ServiceExt;
use tower_http::services::ServeFile;
use utoipa::IntoParams;

use super::extract::QueryArgs;
use super::{ApiError, AppState};
use crate::sandbox::blocking;
use crate::sandbox::snapshot::{self, SnapshotError};
use crate::sandbox::{archive, fingerprint};
use crate::time;
use stream::{ChannelWriter, archive_body, archive_media_type};

/// Records a manifest of the workspace (path, kind, size, mode, sha256, symlink target) and
/// keeps every file version it names in the blob store.
#[utoipa::path(
    post, path = "/v1/workspace/snapshot", tag = "workspace",
    responses(
        (status = 200, body = SnapshotResponse),
        (status = 413, description = "The workspace holds more paths than a scan may (`--scan-max-entries`; `payload_too_large`); nothing is recorded", body = ErrorResponse),
    ),
)]
pub(crate) async fn take_snapshot(
    State(state): State<AppState>,
) -> Result<Json<SnapshotResponse>, ApiError> {
    snapshot_now(&state).await.map(Json)
}

/// Takes a snapshot of the workspace (`POST /v1/workspace/snapshot`, and MCP's
/// `workspace_snapshot`).
pub(crate) async fn snapshot_now(state: &AppState) -> Result<SnapshotResponse, ApiError> {
    let workspace = state.ctx.workspace.clone();
    let shared = state.state.clone();
    let max_paths = state.limits.scan_max_entries;
    let (started, parent) = (std::time::Instant::now(), tracing::Span::current());
    let snapshot::Taken {
        id,
        manifest,
        n_hashed,
        skipped,
        ..
    } = blocking(move || {
        let _span = tracing::info_span!(parent: &parent, "snapshot").entered();
        shared.snapshots.take(
            workspace.root_fd(),
            &shared.ignore,
            &shared.blobs,
            None,
            max_paths,
        )
    })
    .await??;
    state.metrics.snapshot("snapshot", started.elapsed());
    let files = manifest
        .values()
        .filter(|entry| entry.version.kind == EntryKind::File);
    let (n_files, n_bytes) = files.fold((0, 0), |(n, bytes), entry| {
        (n + 1, bytes + entry.version.size)
    });
    Ok(SnapshotResponse {
        snapshot_id: id,
        n_files,
        n_bytes,
        n_hashed,
        taken_at: time::now_rfc3339(),
        skipped: snapshot::skipped(&skipped),
    })
}

/// Every path of a recorded snapshot.
#[utoipa::path(
    get, path = "/v1/workspace/snapshots/{id}", tag = "workspace",
    params(("id" = String, Path, description = "A snapshot id")),
    responses(
        (status = 200, body = ManifestResponse),
        (status = 404, description = "Unknown, or no longer kept (older than the last 32 snapshots, or than those that hold 4,000,000 paths together)", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_snapshot(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ManifestResponse>, ApiError> {
    let manifest = state
        .state
        .snapshots
        .get(&id)
        .ok_or_else(|| SnapshotError::Unknown(id.clone()))?;
    Ok(Json(ManifestResponse {
        snapshot_id: id,
        entries: snapshot::entries(&manifest),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ChangesQuery {
    /// The snapshot to compare with (required).
    #[param(required = true)]
    since: Option<String>,
}

/// The files added, modified, deleted or changed in mode since a snapshot, with a new snapshot
/// of the state they lead to, taken in the same scan.
#[utoipa::path(
    get, path = "/v1/workspace/changes", tag = "workspace",
    params(ChangesQuery),
    responses(
        (status = 200, body = ChangesResponse),
        (status = 404, description = "Unknown snapshot", body = ErrorResponse),
        (status = 413, description = "The workspace holds more paths than a scan may (`--scan-max-entries`; `payload_too_large`); no new snapshot is recorded", body = ErrorResponse),
        (status = 422, description = "`since` is missing", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_changes(
    State(state): State<AppState>,
    Query(query): Query<ChangesQuery>,
) -> Result<Json<ChangesResponse>, ApiError> {
    let since = query.since.ok_or_else(|| {
        ApiError::InvalidArguments(
            "since: required (a snapshot id from POST /v1/workspace/snapshot)".to_owned(),
        )
    })?;
    Ok(Json(changes_since(&state, since).await?))
}

/// The changes since snapshot `since`, and the new snapshot they lead to.
pub(crate) async fn changes_since(
    state: &AppState,
    since: String,
) -> Result<ChangesResponse, ApiError> {
    let workspace = state.ctx.workspace.clone();
    let shared = state.state.clone();
    let base_id = since.clone();
    let max_paths = state.limits.scan_max_entries;
    let (started, parent) = (std::time::Instant::now(), tracing::Span::current());
    let snapshot::Taken {
        id,
        manifest,
        base,
        skipped,
        ..
    } = blocking(move || {
        let _span = tracing::info_span!(parent: &parent, "snapshot", since = %base_id).entered();
        shared.snapshots.take(
            workspace.root_fd(),
            &shared.ignore,
            &shared.blobs,
            Some(&base_id),
            max_paths,
        )
    })
    .await??;
    state.metrics.snapshot("changes", started.elapsed());
    let base = base.expect("a snapshot taken with `since` returns its base");
    Ok(ChangesResponse {
        since,
        snapshot_id: id,
        changes: snapshot::diff(&base, &manifest),
        skipped: snapshot::skipped(&skipped),
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DiffQuery {
    /// The snapshot the diff starts from (required).
    #[param(required = true)]
    since: Option<String>,
    /// A later snapshot the diff ends at; without it, the workspace as it is now (a new
    /// snapshot is taken, and its id answered in `Sandbox-Snapshot-Id`).
    to: Option<String>,
    /// The most bytes of diff answered, 1 to 16777216 (1048576 when absent); past it the diff
    /// ends with a `# diff truncated` line and `Sandbox-Diff-Truncated` is `true`.
    #[param(minimum = 1, maximum = 16777216)]
    max_bytes: Option<u64>,
}

/// The header naming the snapshot a diff ends at.
const SNAPSHOT_HEADER: &str = "sandbox-snapshot-id";
/// The header saying whether a diff was cut at `max_bytes`.
const TRUNCATED_HEADER: &str = "sandbox-diff-truncated";

/// The changes since a snapshot as one unified diff, git style: a `diff --git` header per file
/// (with `new file`, `deleted file` and mode lines), its hunks from the kept versions (3 lines
/// of context), `Binary files … differ` for content with a NUL byte or that is not UTF-8, and a
/// line saying why for a side over 512 KiB or not kept. Folders have no lines.
#[utoipa::path(
    get, path = "/v1/workspace/diff", tag = "workspace",
    params(DiffQuery),
    responses(
        (status = 200, content_type = "text/x-diff", body = String, headers(
            ("Sandbox-Snapshot-Id" = String, description = "The snapshot the diff ends at: `to`, or the one taken now (pass it as the next `since`)"),
            ("Sandbox-Diff-Truncated" = bool, description = "Whether the diff was cut at `max_bytes`"),
        )),
        (status = 404, description = "Unknown snapshot", body = ErrorResponse),
        (status = 413, description = "The workspace holds more paths than a scan may (`--scan-max-entries`; `payload_too_large`); no new snapshot is recorded", body = ErrorResponse),
        (status = 422, description = "`since` is missing, or `max_bytes` is out of range", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_diff(
    State(state): State<AppState>,
    QueryArgs(query): QueryArgs<DiffQuery>,
) -> Result<Response, ApiError> {
    let since = query.since.ok_or_else(|| {
        ApiError::InvalidArguments(
            "since: required (a snapshot id from POST /v1/workspace/snapshot)".to_owned(),
        )
    })?;
    let max_bytes = match query.max_bytes {
        None => 1 << 20,
        Some(n @ 1..=16_777_216) => n as usize,
        Some(n) => {
            return Err(ApiError::InvalidArguments(format!(
                "max_bytes: {n} is out of range (1 to 16777216)"
            )));
        }
    };
    let (changes, end) = match query.to {
        Some(to) => {
            let known = |id: &str| {
                state
                    .state
                    .snapshots
                    .get(id)
                    .ok_or_else(|| SnapshotError::Unknown(id.to_owned()))
            };
            let (base, after) = (known(&since)?, known(&to)?);
            (snapshot::diff(&base, &after), to)
        }
        None => {
            let changes = changes_since(&state, since).await?;
            (changes.changes, changes.snapshot_id)
        }
    };
    let shared = state.state.clone();
    let (text, truncated) =
        blocking(move || snapshot::unified::unified(&changes, &shared.blobs, max_bytes)).await?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/x-diff; charset=utf-8"),
    );
    let end = HeaderValue::from_str(&end)
        .map_err(|err| ApiError::Internal(format!("snapshot id as a header: {err}")))?;
    headers.insert(SNAPSHOT_HEADER, end);
    headers.insert(
        TRUNCATED_HEADER,
        HeaderValue::from_static(if truncated { "true" } else { "false" }),
    );
    Ok((headers, text).into_response())
}

/// The content of a file version named in a manifest or a change list.
#[utoipa::path(
    get, path = "/v1/blobs/{sha256}", tag = "workspace",
    params(("sha256" = String, Path, description = "Hex sha256 from a manifest or a change")),
    responses(
        (status = 200, content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, description = "Not kept (never seen, or over the size limit)", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_blob(
    State(state): State<AppState>,
    Path(sha256): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let path = state.state.blobs.path(&sha256).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no blob {sha256}: not in any snapshot, or over --blob-max-file-bytes"
        ))
    })?;
    let response = ServeFile::new(path)
        .oneshot(request)
        .await
        .map_err(|err| ApiError::Internal(format!("serving blob {sha256}: {err}")))?;
    Ok(response.into_response())
}

/// The workspace as a tar stream; symlinks stay symlinks. FIFOs, sockets and devices are left
/// out (the server logs each). Labelled `application/x-tar`, or `application/octet-stream`
/// for a client that accepts only that. A workspace of more paths than a scan may
/// (`--scan-max-entries`) ends the stream unfinished (an aborted transfer), and the server
/// logs why.
#[utoipa::path(
    get, path = "/v1/workspace/archive", tag = "workspace",
    responses(
        (status = 200, description = "A tar archive of the workspace", content(
            (Vec<u8> = "application/x-tar"),
            (Vec<u8> = "application/octet-stream"),
        )),
        (status = 429, description = "As many archives are being written as the server writes at once (16; `overloaded`, with Retry-After); a stream whose client reads nothing for 60 s, or under 16 KiB/s on average past its first minute, is abandoned, and its place given back", body = ErrorResponse),
    ),
)]
pub(crate) async fn get_archive(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // Each stream holds a blocking thread while it is written: their number is capped.
    let permit = state
        .archive_streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyArchives(MAX_ARCHIVE_STREAMS))?;
    let label = archive_media_type(&headers);
    let workspace = state.ctx.workspace;
    let max_paths = state.limits.scan_max_entries;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    // Held by the thread until it has said whether the archive is complete: the body ends
    // only when every sender is gone, so never before that is known.
    let held = sender.clone();
    let writer = ChannelWriter::new(sender);
    let complete = Arc::new(AtomicBool::new(false));
    let finished = complete.clone();
    // Not awaited, so not `sandbox::blocking`: the writer feeds the response body while it
    // streams. It holds its permit until it returns, which a stalled client makes it do
    // after `STALL`.
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        match archive::write_tar(workspace.root_fd(), writer, max_paths) {
            Ok(skipped) => {
                for left_out in skipped {
                    let path = String::from_utf8_lossy(&left_out.path);
                    tracing::warn!(%path, why = left_out.why, "left out of the workspace archive");
                }
                finished.store(true, Ordering::Release);
            }
            Err(err) => tracing::warn!(cause = %err, "writing the workspace archive failed"),
        }
        drop(held);
    });
    let mut response = Response::new(Body::from_stream(archive_body(receiver, complete)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(label));
    Ok(response)
}

/// How many archives are written at once; one more is answered 429 until one ends.
pub(crate) const MAX_ARCHIVE_STREAMS: usize = 16;

/// Replaces the workspace with a tar (or tar.gz) archive: streamed and unpacked beside it
/// first, within `archive_max_bytes` and `archive_max_entries`, so a bad, empty or oversized
/// archive changes nothing.
#[utoipa::path(
    put, path = "/v1/workspace/archive", tag = "workspace",
    request_body(content = Vec<u8>, content_type = "application/x-tar"),
    responses(
        (status = 200, body = ArchivePutResponse),
        (status = 413, description = "The archive sends or unpacks to more than the limits", body = ErrorResponse),
        (status = 422, description = "Empty, not a tar archive, or an entry leads outside the workspace", body = ErrorResponse),
    ),
)]
pub(crate) async fn put_archive(
    State(state): State<AppState>,
    body: Body,
) -> Result<Json<ArchivePutResponse>, ApiError> {
    let caps = archive::Caps {
        max_entries: state.limits.archive_max_entries,
        max_bytes: state.limits.archive_max_bytes,
    };
    let reader = super::body::stream(body, caps.max_bytes);
    let workspace = state.ctx.workspace.clone();
    let started = std::time::Instant::now();
    let unpacked =
        blocking(move || archive::replace_from_tar(workspace.root_fd(), reader, caps)).await??;
    state.metrics.snapshot("restore", started.elapsed());
    Ok(Json(ArchivePutResponse {
        n_files: unpacked.n_files,
        n_bytes: unpacked.n_bytes,
    }))
}

/// The processes still alive that the server started, the listening sockets, and the hashes of
/// the watched paths outside the workspace (`--watch`).
#[utoipa::path(
    get, path = "/v1/state/fingerprint", tag = "state",
    responses(
        (status = 200, body = FingerprintResponse),
    ),
)]
pub(crate) async fn get_fingerprint(
    State(state): State<AppState>,
) -> Result<Json<FingerprintResponse>, ApiError> {
    let supervisor = state.ctx.supervisor.clone();
    let watch = state.state.watch.clone();
    let answer = blocking(move || fingerprint::take(&supervisor, &watch)).await?;
    Ok(Json(answer))
}

/// A clean slate for the next task: every process the server started killed (and those started
/// by id forgotten), the workspace
/// emptied, and its artifacts, blobs, snapshots and the commands' `TMPDIR` cleared. What a
/// pool does between two leases.
#[utoipa::path(
    post, path = "/v1/reset", tag = "workspace",
    responses(
        (status = 200, body = ResetResponse),
    ),
)]
pub(crate) async fn reset(State(state): State<AppState>) -> Result<Json<ResetResponse>, ApiError> {
    let grace = std::time::Duration::from_millis(state.limits.kill_grace_ms);
    let report = state.ctx.supervisor.kill_all(grace).await;
    state.ctx.processes.clear();
    state.idempotency.clear();
    let workspace = state.ctx.workspace.clone();
    let artifacts = state.ctx.artifacts.clone();
    let shared = state.state.clone();
    let n_removed = blocking(move || {
        let n_removed = std::fs::read_dir(workspace.root())?.count() as u64;
        crate::state_dir::empty(workspace.root())?;
        shared.snapshots.clear();
        shared.blobs.clear()?;
        artifacts.clear()?;
        shared.dirs.clear_tmp()?;
        Ok::<u64, std::io::Error>(n_removed)
    })
    .await?
    .map_err(|err| ApiError::Internal(format!("resetting: {err}")))?;
    tracing::info!(killed = report.killed.len(), n_removed, "reset");
    Ok(Json(ResetResponse {
        killed: report.killed,
        n_removed,
    }))
}
