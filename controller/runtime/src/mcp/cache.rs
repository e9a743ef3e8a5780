//! Tool lists of lazy servers, kept between sessions: a server marked `lazy` starts only when
//! its first tool is called, once its list is known from an earlier session. The key is a hash
//! of how the server is started or reached, so a changed command, argument, variable or URL
//! lists again. `HARNESS_MCP_CACHE` names the folder; else `$XDG_CACHE_HOME/agent-harness/mcp`
//! or `~/.cache/agent-harness/mcp`.

use std::path::PathBuf;

use rmcp::model::Tool;
use sha2::{Digest as _, Sha256};

use super::config::ServerSpec;

fn folder() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("HARNESS_MCP_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("agent-harness/mcp")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/agent-harness/mcp")))
}

fn file(spec: &ServerSpec) -> Option<PathBuf> {
    let key = hex::encode(Sha256::digest(format!(
        "{:?} {}",
        spec.transport, spec.in_sandbox
    )));
    folder().map(|dir| dir.join(format!("{key}.json")))
}

/// The tools a server listed in an earlier session, if known.
pub(super) fn read(spec: &ServerSpec) -> Option<Vec<Tool>> {
    let text = std::fs::read_to_string(file(spec)?).ok()?;
    serde_json::from_str(&text).ok()
}

/// Keeps a server's tools for later sessions (best effort: a cache that cannot be written only
/// means the next session lists again).
pub(super) fn write(spec: &ServerSpec, tools: &[Tool]) {
    let Some(path) = file(spec) else {
        return;
    };
    let Ok(text) = serde_json::to_string(tools) else {
        return;
    };
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let written = path
        .parent()
        .map(std::fs::create_dir_all)
        .transpose()
        .and_then(|_| std::fs::write(&temporary, text))
        .and_then(|()| std::fs::rename(&temporary, &path));
    if let Err(err) = written {
        tracing::debug!(cause = %err, "could not keep an MCP server's tool list");
    }
}
