//! Workspace state: snapshots, changes, blobs, the archive, and the state fingerprint.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
use tokio::sync::mpsc::error::SendTimeoutError;
use tower::ServiceExt;
use tower_http::services::ServeFile;
use utoipa::IntoParams;

use super::{ApiError, AppState};
use crate::sandbox::blocking;
use crate::sandbox::snapshot::{self, SnapshotError};
use crate::sandbox::{archive, fingerprint};
use crate::time;

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
    let writer = ChannelWriter {
        sender,
        buffer: Vec::with_capacity(CHUNK),
        runtime: tokio::runtime::Handle::current(),
        stall: STALL,
        min_rate: MIN_RATE,
        started: std::time::Instant::now(),
        sent: 0,
    };
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

/// The slowest a client may read an archive, on average past its first [`STALL`]: 16 KiB/s.
const MIN_RATE: u64 = 16 << 10;

/// How long the archive writer waits for room for a chunk (a client that reads nothing)
/// before it abandons the stream and gives its thread and its place back.
const STALL: Duration = Duration::from_secs(60);

/// The chunks the writer sends. When the writer stops without having finished (it failed, or
/// its client stalled), the body ends with an error, so the client sees an aborted transfer
/// and never a truncated archive that looks whole.
fn archive_body(
    receiver: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    complete: Arc<AtomicBool>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::unfold(Some(receiver), move |receiver| {
        let complete = complete.clone();
        async move {
            let mut receiver = receiver?;
            match receiver.recv().await {
                Some(item) => Some((item, Some(receiver))),
                None if complete.load(Ordering::Acquire) => None,
                None => {
                    let unfinished = std::io::Error::other(
                        "the workspace archive was not finished (see the server log)",
                    );
                    Some((Err(unfinished), None))
                }
            }
        }
    })
}

/// `application/octet-stream` when the request's `Accept` names it and not `application/x-tar`
/// (nor a wildcard); `application/x-tar` otherwise.
fn archive_media_type(headers: &HeaderMap) -> &'static str {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .collect::<Vec<_>>();
    let names = |wanted: &str| accept.iter().any(|item| item == wanted);
    if names("application/octet-stream")
        && !(names("application/x-tar") || names("*/*") || names("application/*"))
    {
        "application/octet-stream"
    } else {
        "application/x-tar"
    }
}

const CHUNK: usize = 256 * 1024;

/// A `Write` that sends what is written to a response body in chunks, each waiting at most
/// `stall` for room: a client that reads nothing cannot hold the writing thread.
struct ChannelWriter {
    sender: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buffer: Vec<u8>,
    /// The runtime serving the response: the blocking thread waits for room through it.
    runtime: tokio::runtime::Handle,
    stall: Duration,
    /// Past its first `stall`, a client that reads less than this (bytes a second, on
    /// average) is abandoned too: a chunk now and then would hold the stream for ever.
    min_rate: u64,
    started: std::time::Instant,
    sent: u64,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK),
        ));
        let sent = self
            .runtime
            .block_on(self.sender.send_timeout(Ok(chunk), self.stall));
        match sent {
            Ok(()) => {
                self.sent += CHUNK as u64;
                let elapsed = self.started.elapsed();
                if elapsed > self.stall
                    && (self.sent as f64 / elapsed.as_secs_f64()) < self.min_rate as f64
                {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the client read {} bytes in {:.0} s, under {} bytes a second; the archive was abandoned",
                            self.sent,
                            elapsed.as_secs_f64(),
                            self.min_rate
                        ),
                    ));
                }
                Ok(())
            }
            Err(SendTimeoutError::Timeout(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} s; the archive was abandoned",
                    self.stall.as_secs_f64()
                ),
            )),
            Err(SendTimeoutError::Closed(_)) => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client went away",
            )),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A client that reads nothing: the writer gives up after `stall`, so its blocking thread
    /// (and its place among the archive streams) is not held for as long as the client stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_client_that_reads_nothing_frees_the_writer() {
        let (sender, _receiver) = tokio::sync::mpsc::channel(1);
        let mut writer = ChannelWriter {
            sender,
            buffer: Vec::new(),
            runtime: tokio::runtime::Handle::current(),
            stall: Duration::from_millis(100),
            min_rate: 0,
            started: std::time::Instant::now(),
            sent: 0,
        };
        let started = std::time::Instant::now();
        let written = tokio::task::spawn_blocking(move || {
            let chunk = vec![0u8; CHUNK];
            writer.write_all(&chunk)?; // fills the channel
            writer.write_all(&chunk) // finds no room
        })
        .await
        .unwrap();
        let err = written.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// A client that reads a chunk now and then, never stalling for the whole `stall`, is
    /// abandoned once its average rate is under the least.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_reads_a_trickle_is_abandoned() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1);
        let mut writer = ChannelWriter {
            sender,
            buffer: Vec::new(),
            runtime: tokio::runtime::Handle::current(),
            stall: Duration::from_millis(100),
            min_rate: (CHUNK as u64) * 100,
            started: std::time::Instant::now(),
            sent: 0,
        };
        let reader = tokio::spawn(async move {
            while receiver.recv().await.is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let written = tokio::task::spawn_blocking(move || {
            let chunk = vec![0u8; CHUNK];
            for _ in 0..100 {
                writer.write_all(&chunk)?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
        let err = written.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("bytes a second"), "{err}");
        reader.abort();
    }
}
