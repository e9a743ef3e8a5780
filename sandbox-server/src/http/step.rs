//! One round trip per tool call: `POST /v1/tools/{name}` may return, as `step`, what its caller
//! needs to record the step (the workspace changes since a snapshot, small file versions and
//! output streams inline, the state fingerprint), which otherwise takes 3 to 5 more requests.

use std::collections::BTreeMap;

use base64::Engine;
use sandbox_protocol::{ChangesResponse, ToolStep};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use super::{ApiError, AppState};
use crate::sandbox::blocking;
use crate::sandbox::fingerprint;
use crate::sandbox::output::StoredArtifact;

/// The default of `inline_max_bytes`.
const DEFAULT_INLINE: u64 = 64 << 10;
/// The largest `inline_max_bytes` taken.
pub(crate) const MAX_INLINE: u64 = 1 << 20;
/// The most bytes inlined in one answer, in all; what does not fit is fetched separately.
const INLINE_BUDGET: u64 = 8 << 20;

/// What to return with the tool's result.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct StepQuery {
    /// A snapshot id: `step.changes` lists what the call changed since it, with a new snapshot
    /// to pass as the next `since`. Checked before the tool runs (404 when unknown).
    since: Option<String>,
    /// `true`: `step.fingerprint` is the state fingerprint after the call.
    fingerprint: Option<bool>,
    /// New file versions and output streams up to this many bytes each come inline in
    /// `step.inline` (8 MiB in all at most); 0 inlines nothing. Default 65536.
    #[param(minimum = 0, maximum = 1048576)]
    inline_max_bytes: Option<u64>,
}

impl StepQuery {
    /// Whether the answer carries a `step` at all.
    pub(crate) fn wanted(&self) -> bool {
        self.since.is_some() || self.fingerprint == Some(true) || self.inline_max_bytes.is_some()
    }

    /// Refuses a bad query before anything runs.
    pub(crate) fn check(&self, state: &AppState) -> Result<(), ApiError> {
        if let Some(max) = self.inline_max_bytes
            && max > MAX_INLINE
        {
            return Err(ApiError::InvalidArguments(format!(
                "inline_max_bytes: must be at most {MAX_INLINE}, got {max}"
            )));
        }
        if let Some(since) = &self.since
            && state.state.snapshots.get(since).is_none()
        {
            return Err(ApiError::NotFound(format!(
                "since: no snapshot `{since}` (unknown, or one of the oldest dropped)"
            )));
        }
        Ok(())
    }
}

/// The step of a call whose result is `result`.
pub(crate) async fn record(
    state: &AppState,
    query: StepQuery,
    result: &Value,
) -> Result<ToolStep, ApiError> {
    let changes = match query.since {
        Some(since) => Some(super::workspace::changes_since(state, since).await?),
        None => None,
    };
    let fingerprint = if query.fingerprint == Some(true) {
        let supervisor = state.ctx.supervisor.clone();
        let watch = state.state.watch.clone();
        Some(blocking(move || fingerprint::take(&supervisor, &watch)).await?)
    } else {
        None
    };
    let max = query.inline_max_bytes.unwrap_or(DEFAULT_INLINE);
    let wanted = inline_candidates(state, changes.as_ref(), result, max);
    let inline = blocking(move || read_inline(wanted)).await?;
    Ok(ToolStep {
        changes,
        fingerprint,
        inline,
    })
}

/// Files to inline, by sha256: new file versions, then the command's output streams, each at
/// most `max` bytes, within the budget.
fn inline_candidates(
    state: &AppState,
    changes: Option<&ChangesResponse>,
    result: &Value,
    max: u64,
) -> Vec<(String, Source)> {
    let mut wanted = Vec::new();
    let mut budget = INLINE_BUDGET;
    let mut take = |sha256: &str, size: u64, path: Option<Source>| {
        if size == 0 || size > max || size > budget {
            return;
        }
        if let Some(path) = path {
            budget -= size;
            wanted.push((sha256.to_owned(), path));
        }
    };
    let versions = changes
        .into_iter()
        .flat_map(|changes| &changes.changes)
        .filter_map(|change| change.after.as_ref());
    for version in versions {
        if let Some(sha256) = &version.sha256 {
            take(
                sha256,
                version.size,
                state.state.blobs.path(sha256).map(Source::File),
            );
        }
    }
    for stream in ["stdout_artifact", "stderr_artifact"] {
        let artifact = &result[stream];
        let (Some(id), Some(sha256), Some(size)) = (
            artifact["id"].as_str(),
            artifact["sha256"].as_str(),
            artifact["size"].as_u64(),
        ) else {
            continue;
        };
        match state.ctx.artifacts.lookup(id) {
            Some(StoredArtifact::File(path)) => take(sha256, size, Some(Source::File(path))),
            Some(StoredArtifact::Memory(bytes)) => take(sha256, size, Some(Source::Memory(bytes))),
            _ => {}
        }
    }
    wanted
}

/// Where bytes to inline are.
enum Source {
    File(std::path::PathBuf),
    Memory(std::sync::Arc<[u8]>),
}

/// Reads the files; one that vanished meanwhile (evicted) is left for the caller to fetch.
fn read_inline(wanted: Vec<(String, Source)>) -> BTreeMap<String, String> {
    let engine = base64::engine::general_purpose::STANDARD;
    wanted
        .into_iter()
        .filter_map(|(sha256, source)| {
            let encoded = match source {
                Source::File(path) => engine.encode(std::fs::read(&path).ok()?),
                Source::Memory(bytes) => engine.encode(bytes),
            };
            Some((sha256, encoded))
        })
        .collect()
}
