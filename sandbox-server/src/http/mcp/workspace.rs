//! The workspace tools of the MCP server: a snapshot, the changes since one, a file's content
//! at a version, and the workspace restored to a snapshot.

use std::io::Read as _;

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use super::{answered, failed};
use crate::http::{ApiError, AppState};
use crate::sandbox::archive::Caps;
use crate::sandbox::blocking;
use crate::sandbox::snapshot::restore::{RestoreError, restore};

type Schema = fn() -> Value;

/// Name, description and argument schema of each workspace tool.
pub(super) const TOOLS: [(&str, &str, Schema); 4] = [
    (
        "workspace_snapshot",
        "Record the workspace as it is now (every path's kind, size, mode and content hash); returns the snapshot's id, for workspace_changes and workspace_restore.",
        || json!({"type": "object", "properties": {}, "additionalProperties": false}),
    ),
    (
        "workspace_changes",
        "The files added, modified and deleted since a snapshot, and a new snapshot of now.",
        || json!({"type": "object", "properties": {"since": {"type": "string", "description": "A snapshot id from workspace_snapshot or workspace_changes"}}, "required": ["since"], "additionalProperties": false}),
    ),
    (
        "file_at_version",
        "A file's content as a snapshot recorded it: by `snapshot_id` and `path`, or by the `sha256` a change or manifest names.",
        || json!({"type": "object", "properties": {"snapshot_id": {"type": "string"}, "path": {"type": "string"}, "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}, "additionalProperties": false}),
    ),
    (
        "workspace_restore",
        "Replace the whole workspace with a snapshot's files (what is not in the snapshot is removed). Running processes are not stopped.",
        || json!({"type": "object", "properties": {"snapshot_id": {"type": "string"}}, "required": ["snapshot_id"], "additionalProperties": false}),
    ),
];

fn text_arg(args: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(ApiError::InvalidArguments(format!(
            "{key}: must be a string, got {other}"
        ))),
    }
}

fn required(args: &Map<String, Value>, key: &str) -> Result<String, ApiError> {
    text_arg(args, key)?.ok_or_else(|| ApiError::InvalidArguments(format!("{key}: required")))
}

/// Runs workspace tool `name`, if it is one.
pub(super) async fn call(
    state: &AppState,
    name: &str,
    args: Map<String, Value>,
) -> Option<CallToolResult> {
    let result = match name {
        "workspace_snapshot" => snapshot(state).await,
        "workspace_changes" => changes(state, &args).await,
        "file_at_version" => file_at_version(state, &args).await,
        "workspace_restore" => restore_to(state, &args).await,
        _ => return None,
    };
    Some(result.unwrap_or_else(|err| failed(&err)))
}

fn with_output(value: impl serde::Serialize, output: String) -> Result<CallToolResult, ApiError> {
    let mut value =
        serde_json::to_value(value).map_err(|err| ApiError::Internal(err.to_string()))?;
    if let Value::Object(fields) = &mut value {
        fields.insert("output".to_owned(), Value::String(output));
    }
    Ok(answered(value))
}

async fn snapshot(state: &AppState) -> Result<CallToolResult, ApiError> {
    let taken = crate::http::workspace::snapshot_now(state).await?;
    let output = format!(
        "snapshot {}: {} files, {} bytes",
        taken.snapshot_id, taken.n_files, taken.n_bytes
    );
    with_output(taken, output)
}

async fn changes(state: &AppState, args: &Map<String, Value>) -> Result<CallToolResult, ApiError> {
    let since = required(args, "since")?;
    if state.state.snapshots.get(&since).is_none() {
        return Err(ApiError::NotFound(format!("since: no snapshot `{since}`")));
    }
    let changes = crate::http::workspace::changes_since(state, since).await?;
    let mut lines = vec![format!(
        "{} changes since {} (now snapshot {}):",
        changes.changes.len(),
        changes.since,
        changes.snapshot_id
    )];
    lines.extend(
        changes
            .changes
            .iter()
            .map(|c| format!("  {} {}", c.change.as_str(), c.path)),
    );
    with_output(changes, lines.join("\n"))
}

async fn file_at_version(
    state: &AppState,
    args: &Map<String, Value>,
) -> Result<CallToolResult, ApiError> {
    let sha256 = match (
        text_arg(args, "sha256")?,
        text_arg(args, "snapshot_id")?,
        text_arg(args, "path")?,
    ) {
        (Some(sha), None, None) => sha,
        (None, Some(id), Some(path)) => {
            let manifest =
                state.state.snapshots.get(&id).ok_or_else(|| {
                    ApiError::NotFound(format!("snapshot_id: no snapshot `{id}`"))
                })?;
            let entry = manifest.get(path.as_bytes()).ok_or_else(|| {
                ApiError::NotFound(format!("path: `{path}` is not in snapshot {id}"))
            })?;
            entry.version.sha256.clone().ok_or_else(|| {
                ApiError::InvalidArguments(format!("path: `{path}` is not a file in snapshot {id}"))
            })?
        }
        _ => {
            return Err(ApiError::InvalidArguments(
                "give `sha256`, or `snapshot_id` and `path`".to_owned(),
            ));
        }
    };
    let file = state
        .state
        .blobs
        .path(&sha256)
        .ok_or_else(|| ApiError::NotFound(format!("no kept content with sha256 {sha256}")))?;
    let limit = state.ctx.limits.output_limit_chars;
    let (bytes, total) = blocking(move || read_head(&file, limit as u64 * 4)).await??;
    let text = String::from_utf8_lossy(&bytes);
    let mut output: String = text.chars().take(limit).collect();
    if total > bytes.len() as u64 || output.len() < text.len() {
        output.push_str(&format!(
            "\n[cut: {total} bytes in all; GET /v1/blobs/{sha256} has them]"
        ));
    }
    with_output(json!({"sha256": sha256, "size": total}), output)
}

fn read_head(path: &std::path::Path, max: u64) -> Result<(Vec<u8>, u64), ApiError> {
    let io = |err: std::io::Error| ApiError::Internal(format!("reading a blob: {err}"));
    let file = std::fs::File::open(path).map_err(io)?;
    let total = file.metadata().map_err(io)?.len();
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).map_err(io)?;
    Ok((bytes, total))
}

async fn restore_to(
    state: &AppState,
    args: &Map<String, Value>,
) -> Result<CallToolResult, ApiError> {
    let id = required(args, "snapshot_id")?;
    let manifest = state
        .state
        .snapshots
        .get(&id)
        .ok_or_else(|| ApiError::NotFound(format!("snapshot_id: no snapshot `{id}`")))?;
    let workspace = state.ctx.workspace.clone();
    let shared = state.state.clone();
    let caps = Caps {
        max_entries: state.limits.archive_max_entries,
        max_bytes: state.limits.archive_max_bytes,
    };
    let started = std::time::Instant::now();
    let restored = blocking(move || {
        let root = workspace.root_fd();
        restore(root, &manifest, &shared.blobs, &shared.dirs.state, caps)
    })
    .await?
    .map_err(|err| match err {
        RestoreError::NotKept(_) | RestoreError::Mismatch { .. } => {
            ApiError::InvalidArguments(err.to_string())
        }
        RestoreError::Archive(err) => ApiError::from(err),
        RestoreError::Io(err) => ApiError::Internal(format!("restoring: {err}")),
    })?;
    state.metrics.snapshot("restore", started.elapsed());
    let output = format!(
        "restored snapshot {id}: {} files, {} bytes",
        restored.n_files, restored.n_bytes
    );
    with_output(
        json!({"snapshot_id": id, "n_files": restored.n_files, "n_bytes": restored.n_bytes}),
        output,
    )
}
