//! The hooks file (`--hooks FILE`, or a task's `hooks:` key): a list of hooks, each with its
//! event, matcher, handler, timeout and what a failure means. Checked whole when loaded: a
//! mistake is an error naming the hook and the key before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{DEFAULT_TIMEOUT, HookEvent};
use crate::input::InputError;

/// The file: `hooks: [ … ]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksFile {
    pub hooks: Vec<HookEntry>,
}

/// One hook as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    pub event: HookEvent,
    /// A name for logs and reasons; `<event>#<n>` when absent.
    pub name: Option<String>,
    /// Tool names it applies to (tool events only): globs with `*` and `?`, alternatives
    /// separated by `|` (`bash|exec`, `mcp__*`); every tool when absent.
    pub matcher: Option<String>,
    /// Run with `sh -c` in the hooks file's folder.
    pub command: Option<String>,
    /// POST the JSON here.
    pub url: Option<String>,
    /// Headers for `url` (values may name `${VAR}`s of the controller's environment).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds; 30 when absent.
    pub timeout: Option<f64>,
    /// What a hook that fails or times out decides: `deny` (the default) or `allow`.
    pub on_error: Option<OnError>,
}

/// What a failed hook decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    Deny,
    Allow,
}

/// How a hook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    Command(String),
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// One hook, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSpec {
    pub event: HookEvent,
    pub name: String,
    pub matcher: Option<String>,
    pub handler: Handler,
    pub timeout: Duration,
    pub on_error: OnError,
}

/// The hooks of a session, in configuration order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hooks {
    pub(super) hooks: Vec<HookSpec>,
    /// Where command hooks run (the hooks file's folder).
    pub(super) folder: PathBuf,
}

impl Hooks {
    /// The values of the HTTP hooks' headers (tokens, once `${VAR}` is filled): secrets, for
    /// the log to redact.
    pub fn secret_values(&self) -> Vec<String> {
        self.hooks
            .iter()
            .flat_map(|hook| match &hook.handler {
                Handler::Http { headers, .. } => headers
                    .iter()
                    .map(|(_, value)| value.clone())
                    .collect::<Vec<_>>(),
                Handler::Command(_) => Vec::new(),
            })
            .collect()
    }

    /// No hooks.
    pub fn none() -> Hooks {
        Hooks::default()
    }

    /// Reads and checks a hooks file.
    pub fn load(path: &Path) -> Result<Hooks, InputError> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| InputError(format!("reading hooks file {}: {err}", path.display())))?;
        let file: HooksFile = serde_norway::from_str(&text)
            .map_err(|err| InputError(format!("hooks file {}: {err}", path.display())))?;
        let folder = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        let hooks = file
            .hooks
            .into_iter()
            .enumerate()
            .map(|(n, entry)| check(n, entry))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|why| InputError(format!("hooks file {}: {why}", path.display())))?;
        Ok(Hooks { hooks, folder })
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Where command hooks run: the hooks file's folder.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The hooks of `event` that apply to `tool` (every hook of an event without a tool).
    pub fn matching(&self, event: HookEvent, tool: Option<&str>) -> Vec<&HookSpec> {
        self.hooks
            .iter()
            .filter(|hook| hook.event == event)
            .filter(|hook| match (&hook.matcher, tool) {
                (Some(pattern), Some(tool)) => harness_log::text::glob_matches(pattern, tool),
                _ => true,
            })
            .collect()
    }
}

fn check(n: usize, entry: HookEntry) -> Result<HookSpec, String> {
    let name = entry
        .name
        .clone()
        .unwrap_or_else(|| format!("{}#{}", entry.event.as_str(), n + 1));
    let at = |why: String| format!("hook {name}: {why}");
    if entry.matcher.is_some() && !entry.event.has_tool() {
        return Err(at(format!(
            "`matcher` applies to tool events (pre_tool_use, post_tool_use), not {}",
            entry.event.as_str()
        )));
    }
    if let Some(pattern) = &entry.matcher
        && (pattern.is_empty() || pattern.split('|').any(str::is_empty))
    {
        return Err(at(format!(
            "`matcher` {pattern:?} has an empty alternative"
        )));
    }
    let handler = match (entry.command, entry.url) {
        (Some(command), None) if !command.trim().is_empty() => Handler::Command(command),
        (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
            let headers = entry
                .headers
                .into_iter()
                .map(|(k, v)| expand(&v).map(|v| (k, v)).map_err(&at))
                .collect::<Result<Vec<_>, _>>()?;
            Handler::Http { url, headers }
        }
        (None, Some(url)) => return Err(at(format!("`url` {url:?} is not http(s)"))),
        (Some(_), Some(_)) => return Err(at("give `command` or `url`, not both".to_owned())),
        _ => return Err(at("give a `command` or a `url`".to_owned())),
    };
    let timeout = match entry.timeout {
        None => DEFAULT_TIMEOUT,
        Some(secs) if secs > 0.0 && secs <= 3600.0 => Duration::from_secs_f64(secs),
        Some(secs) => {
            return Err(at(format!(
                "`timeout` must be in (0, 3600] seconds, got {secs}"
            )));
        }
    };
    Ok(HookSpec {
        event: entry.event,
        name,
        matcher: entry.matcher,
        handler,
        timeout,
        on_error: entry.on_error.unwrap_or(OnError::Deny),
    })
}

/// `${VAR}` in a header value, from the controller's environment (a missing one is an error).
fn expand(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            return Err(format!("header value {value:?}: `${{` without `}}`"));
        };
        let name = &rest[start + 2..start + end];
        let found = std::env::var(name)
            .map_err(|_| format!("header value names ${{{name}}}, which is not set"))?;
        out.push_str(&found);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_tool_names() {
        assert!(harness_log::text::glob_matches("*", "bash"));
        assert!(harness_log::text::glob_matches("bash|exec", "exec"));
        assert!(!harness_log::text::glob_matches("bash|exec", "bash2"));
        assert!(harness_log::text::glob_matches(
            "mcp__*",
            "mcp__git__status"
        ));
        assert!(harness_log::text::glob_matches(
            "mcp__*__status",
            "mcp__git__status"
        ));
        assert!(!harness_log::text::glob_matches("mcp__*", "read_file"));
        assert!(harness_log::text::glob_matches("?ead_file", "read_file"));
        assert!(harness_log::text::glob_matches(
            "write_*|search_*",
            "search_replace"
        ));
    }

    fn load(text: &str) -> Result<Hooks, InputError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hooks.yaml");
        std::fs::write(&path, text).unwrap();
        Hooks::load(&path)
    }

    #[test]
    fn mistakes_name_the_hook_and_the_key() {
        let err = |text: &str| load(text).unwrap_err().to_string();
        assert!(
            err("hooks:\n  - event: pre_tool_use\n")
                .contains("hook pre_tool_use#1: give a `command` or a `url`")
        );
        assert!(
            err("hooks:\n  - {event: stop, matcher: bash, command: x}\n")
                .contains("`matcher` applies to tool events")
        );
        assert!(
            err("hooks:\n  - {event: pre_tool_use, command: x, timeout: 0}\n")
                .contains("`timeout` must be")
        );
        assert!(
            err("hooks:\n  - {event: pre_tool_use, url: ftp://x}\n").contains("is not http(s)")
        );
        assert!(
            err("hooks:\n  - {event: pre_tool_use, command: x, colour: red}\n")
                .contains("unknown field `colour`")
        );
        assert!(
            err("hooks:\n  - {event: before_tool, command: x}\n")
                .contains("unknown variant `before_tool`")
        );
        assert!(err("hooks:\n  - {event: pre_tool_use, url: 'http://x', headers: {A: '${HARNESS_TEST_UNSET_VAR}'}}\n").contains("HARNESS_TEST_UNSET_VAR"));
    }

    #[test]
    fn hooks_are_matched_by_event_and_tool_in_order() {
        let hooks = load("hooks:\n  - {event: pre_tool_use, matcher: bash, command: a}\n  - {event: pre_tool_use, command: b, name: every}\n  - {event: post_tool_use, command: c}\n").unwrap();
        let names = |tool| -> Vec<String> {
            hooks
                .matching(HookEvent::PreToolUse, Some(tool))
                .iter()
                .map(|h| h.name.clone())
                .collect()
        };
        assert_eq!(names("bash"), ["pre_tool_use#1", "every"]);
        assert_eq!(names("read_file"), ["every"]);
        assert_eq!(hooks.matching(HookEvent::Stop, None).len(), 0);
    }
}
