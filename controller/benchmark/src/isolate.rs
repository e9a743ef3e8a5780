//! What stands between a benchmark task's agent and its verifier: nothing the agent's phase
//! did reaches the tests, and what it tried is kept as evidence.
//!
//! Before the agent runs, the guarded paths (`/tests`, `/logs/verifier`, and the files pytest
//! reads as its configuration above `/tests`) are saved as the task's image has them. When the
//! agent's phase ends, every process it left is ended through the task's server (the image's
//! own entrypoint excepted), the guarded paths are compared with what was saved, deleted and
//! put back, and checked again: a verifier never reads a reward file, a test or a `conftest.py`
//! of the agent's. The agent's calls that named a guarded path are found in the session log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use sandbox_protocol::{ChangeKind, ToolInput};
use sha2::{Digest, Sha256};

use super::host::TaskHost;
use crate::error::{Failed, failed};
use harness_log::{EndedProcess, Event, GuardedCall, GuardedChange, VerifierIsolated};
use harness_runtime::step::describe;

/// The paths the verifier's verdict depends on and the agent must not touch. pytest looks for
/// `conftest.py` and its configuration in the folders above its tests: an agent's
/// `/conftest.py` next to a `/pytest.ini` would run inside the tests.
pub const GUARDED: &[&str] = &[
    "/tests",
    "/logs/verifier",
    "/conftest.py",
    "/pytest.ini",
    "/pyproject.toml",
    "/setup.cfg",
    "/tox.ini",
];

/// At most this much of one guarded path is saved (an image's `/tests` is small).
const SAVE_CAP: u64 = 64 << 20;

/// The guarded paths as the image had them, before the agent ran.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    /// Each path's archive, `None` when the path did not exist.
    saved: Vec<(&'static str, Option<Vec<u8>>)>,
    /// Paths that could not be saved, with why.
    unguarded: Vec<String>,
    /// The container's changes against its image before the agent ran, `None` where they
    /// cannot be listed (see [`crate::runtime_changes`]).
    changes: Option<Vec<(String, ChangeKind)>>,
}

/// One entry of a guarded path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    kind: char,
    mode: u32,
    size: u64,
    /// Of the content, or of a link's target.
    digest: String,
}

type Inventory = BTreeMap<String, Item>;

impl Baseline {
    /// Saves every guarded path of the container.
    pub async fn take(host: &dyn TaskHost) -> Baseline {
        let mut baseline = Baseline::default();
        for path in GUARDED {
            match host.archive(path, SAVE_CAP).await {
                Ok(tar) => baseline.saved.push((path, tar)),
                Err(err) => baseline
                    .unguarded
                    .push(format!("{path}: {}", describe(&err))),
            }
        }
        match host.changes().await {
            Ok(changes) => baseline.changes = changes,
            Err(err) => baseline.unguarded.push(format!(
                "what runs the tests (the container's changes): {}",
                describe(&err)
            )),
        }
        baseline
    }

    fn inventory(&self) -> Inventory {
        let mut all = Inventory::new();
        for (path, tar) in &self.saved {
            if let Some(tar) = tar {
                all.extend(inventory_of(parent_of(path), tar));
            }
        }
        all
    }
}

/// The folder a guarded path's archive unpacks into.
fn parent_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

/// The entries of an archive of a path under `parent`, by their full path.
fn inventory_of(parent: &str, tar: &[u8]) -> Inventory {
    let mut found = Inventory::new();
    let mut archive = tar::Archive::new(tar);
    let Ok(entries) = archive.entries() else {
        return found;
    };
    for entry in entries.take(100_000) {
        let Ok(mut entry) = entry else { break };
        let Ok(rel) = entry.path().map(|p| p.to_string_lossy().into_owned()) else {
            continue;
        };
        let header = entry.header();
        let kind = header.entry_type();
        let (mode, size) = (header.mode().unwrap_or(0), header.size().unwrap_or(0));
        let (letter, digest) = if kind.is_dir() {
            ('d', String::new())
        } else if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default();
            ('l', target)
        } else if kind.is_file() {
            let mut hasher = Sha256::new();
            let _ = std::io::copy(&mut entry, &mut hasher);
            ('f', hex::encode(hasher.finalize()))
        } else {
            ('o', String::new())
        };
        let full = format!(
            "{}/{}",
            parent.trim_end_matches('/'),
            rel.trim_end_matches('/')
        );
        found.insert(
            full,
            Item {
                kind: letter,
                mode: mode & 0o7777,
                size,
                digest,
            },
        );
    }
    found
}

/// What changed from `before` to `after`, path by path.
fn changes(before: &Inventory, after: &Inventory) -> Vec<GuardedChange> {
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter_map(|path| {
            let change = match (before.get(path), after.get(path)) {
                (None, Some(_)) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Deleted,
                (Some(a), Some(b)) if a.kind != b.kind => ChangeKind::TypeChanged,
                (Some(a), Some(b)) if a.digest != b.digest || a.size != b.size => {
                    ChangeKind::Modified
                }
                (Some(a), Some(b)) if a.mode != b.mode => ChangeKind::ModeChanged,
                _ => return None,
            };
            Some(GuardedChange {
                path: path.clone(),
                change,
                size: after.get(path).map(|item| item.size),
            })
        })
        .collect()
}

/// The guarded path `text` names as a path of its own (`/tests/x`, `>/logs/verifier/…`), if
/// any: the first, as written.
fn named_guarded_path(text: &str) -> Option<String> {
    for path in GUARDED {
        let mut from = 0;
        while let Some(at) = text[from..].find(path) {
            let start = from + at;
            let end = start + path.len();
            from = end;
            let before = text[..start].chars().next_back();
            let after = text[end..].chars().next();
            let starts = before.is_none_or(|c| !(c.is_alphanumeric() || "_-./~$".contains(c)));
            let ends = after.is_none_or(|c| !(c.is_alphanumeric() || "_-.".contains(c)));
            if starts && ends {
                let rest: String = text[end..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && !"'\";|&)<>`".contains(*c))
                    .collect();
                return Some(format!("{path}{rest}"));
            }
        }
    }
    None
}

/// Every string in a call's arguments (a command, a path, a file's content).
fn strings_of(value: &serde_json::Value) -> Vec<&str> {
    match value {
        serde_json::Value::String(text) => vec![text.as_str()],
        serde_json::Value::Array(items) => items.iter().flat_map(strings_of).collect(),
        serde_json::Value::Object(map) => map.values().flat_map(strings_of).collect(),
        _ => Vec::new(),
    }
}

/// The calls of the session logged in `dir` that named a guarded path.
pub fn calls_naming_guarded_paths(dir: &Path) -> Vec<GuardedCall> {
    let Ok(events) = harness_replay::events(dir, |_| {}) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for envelope in events.flatten() {
        let Event::ToolCall(call) = envelope.event else {
            continue;
        };
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        // A call whose arguments do not parse never ran; it may still name a path.
        let input = ToolInput::parse(&call.name, args.clone()).ok();
        // A file tool's target is a write; any other mention (a command, a file's content) names.
        let target = input
            .as_ref()
            .filter(|input| input.writes_a_file())
            .and_then(ToolInput::path)
            .and_then(named_guarded_path);
        let named = match target {
            Some(path) => Some((path, true)),
            None => strings_of(&args)
                .into_iter()
                .find_map(named_guarded_path)
                .or_else(|| {
                    args.is_null()
                        .then(|| named_guarded_path(&call.arguments))
                        .flatten()
                })
                .map(|p| (p, false)),
        };
        if let Some((path, write)) = named {
            found.push(GuardedCall {
                call_id: call.call_id,
                tool: call.name,
                path,
                write,
            });
        }
    }
    found
}

/// Ends the agent's processes, puts the guarded paths back as `baseline` had them, and says
/// what the agent had done; `log_dir` holds the session's log (its calls). Errors are the
/// container's or the engine's (infrastructure): the verifier cannot be trusted to run.
pub async fn isolate(
    host: &dyn TaskHost,
    baseline: &Baseline,
    log_dir: &Path,
    step: Option<&str>,
) -> Failed<VerifierIsolated> {
    let started = Instant::now();
    let processes_ended = host
        .end_processes()
        .await?
        .into_iter()
        .map(|(pid, command)| EndedProcess { pid, command })
        .collect();
    let before = baseline.inventory();
    let mut after = Inventory::new();
    let mut unguarded = baseline.unguarded.clone();
    for (path, _) in &baseline.saved {
        match host.archive(path, SAVE_CAP).await {
            Ok(Some(tar)) => after.extend(inventory_of(parent_of(path), &tar)),
            Ok(None) => {}
            // Too big to read: it changed (the image's was small enough), and goes anyway.
            Err(_) => {
                after.insert(
                    (*path).to_owned(),
                    Item {
                        kind: '?',
                        mode: 0,
                        size: SAVE_CAP,
                        digest: "over the cap".to_owned(),
                    },
                );
            }
        }
    }
    let mut changes = changes(&before, &after);
    if reset(host, baseline).await? {
        changes.push(GuardedChange {
            path: "/logs".to_owned(),
            change: ChangeKind::TypeChanged,
            size: None,
        });
    }
    // Checked, not assumed: the agent may have left programs that undo the reset.
    let mut now = Inventory::new();
    for (path, _) in &baseline.saved {
        if let Some(tar) = host.archive(path, SAVE_CAP).await.ok().flatten() {
            now.extend(inventory_of(parent_of(path), &tar));
        }
    }
    let restored = crate::isolate::changes(&before, &now).is_empty();
    if !restored {
        unguarded.push("the guarded paths differ from the image's after their reset".to_owned());
    }
    let calls = calls_naming_guarded_paths(log_dir);
    let egress = host.egress_decisions().await;
    let runtime = runtime_changes(host, baseline, &mut unguarded).await;
    Ok(VerifierIsolated {
        egress,
        step: step.map(str::to_owned),
        processes_ended,
        tampered: !changes.is_empty() || !runtime.is_empty() || calls.iter().any(|c| c.write),
        runtime,
        changes,
        calls,
        restored,
        unguarded,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

/// What the agent's phase changed in what runs the tests, outside the guarded paths; what
/// could not be compared is said in `unguarded`.
async fn runtime_changes(
    host: &dyn TaskHost,
    baseline: &Baseline,
    unguarded: &mut Vec<String>,
) -> Vec<GuardedChange> {
    let Some(before) = &baseline.changes else {
        unguarded.push(
            "what runs the tests (programs on PATH, site-packages, the dynamic linker, libraries): not compared, as this host cannot list the container's changes".to_owned(),
        );
        return Vec::new();
    };
    match host.changes().await {
        Ok(Some(after)) => crate::runtime_changes::found(before, &after),
        Ok(None) => Vec::new(),
        Err(err) => {
            unguarded.push(format!(
                "what runs the tests (the container's changes): {}",
                describe(&err)
            ));
            Vec::new()
        }
    }
}

/// Puts the guarded paths back as the image had them, with no evidence taken: between a
/// step's verifier and the next step (Harbor empties `/tests` and `/logs/verifier` there too),
/// so what the next step's agent is judged against is the image's state, not the last
/// verifier's files.
pub async fn restore(host: &dyn TaskHost, baseline: &Baseline) -> Failed<()> {
    reset(host, baseline).await?;
    Ok(())
}

/// Deletes every guarded path (and `/logs` when the agent replaced the folder), then unpacks
/// the saved archives. Returns whether `/logs` had been replaced.
async fn reset(host: &dyn TaskHost, baseline: &Baseline) -> Failed<bool> {
    let paths: Vec<&str> = baseline.saved.iter().map(|(p, _)| *p).collect();
    let script = format!(
        "replaced=; if [ -L /logs ] || {{ [ -e /logs ] && [ ! -d /logs ]; }}; then rm -f /logs; replaced=1; fi\n\
         rm -rf -- {}\nmkdir -p /logs\n[ -n \"$replaced\" ] && echo logs-replaced; true",
        paths.join(" ")
    );
    let root = BTreeMap::new();
    let exec = host
        .exec(&script, &root, Some("0"), Duration::from_secs(120))
        .await?;
    if exec.exit_code != Some(0) {
        failed!(
            "resetting the verifier's folders failed ({}): {}",
            exec.exit_code
                .map_or_else(|| "timed out".to_owned(), |c| format!("exit {c}")),
            exec.output.trim()
        );
    }
    for (path, tar) in &baseline.saved {
        if let Some(tar) = tar {
            host.restore(parent_of(path), tar.clone()).await?;
        }
    }
    Ok(exec.output.contains("logs-replaced"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut header = tar::Header::new_gnu();
            match content {
                Some(text) => {
                    header.set_mode(0o644);
                    header.set_size(text.len() as u64);
                    builder
                        .append_data(&mut header, path, text.as_bytes())
                        .unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(0o777);
                    header.set_size(0);
                    builder
                        .append_data(&mut header, path, std::io::empty())
                        .unwrap();
                }
            }
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn changes_to_guarded_paths_are_found_path_by_path() {
        let before = inventory_of("/logs", &tar_of(&[("verifier/", None)]));
        let after = inventory_of(
            "/logs",
            &tar_of(&[("verifier/", None), ("verifier/reward.json", Some("1"))]),
        );
        assert_eq!(
            changes(&before, &after),
            vec![GuardedChange {
                path: "/logs/verifier/reward.json".to_owned(),
                change: ChangeKind::Added,
                size: Some(1),
            }]
        );
        let tests = inventory_of("/", &tar_of(&[("tests/", None), ("tests/t.py", Some("a"))]));
        let edited = inventory_of("/", &tar_of(&[("tests/", None), ("tests/t.py", Some("b"))]));
        assert_eq!(changes(&tests, &edited)[0].change, ChangeKind::Modified);
        assert_eq!(changes(&tests, &Inventory::new()).len(), 2);
        assert!(changes(&tests, &tests).is_empty());
    }

    #[test]
    fn a_guarded_path_is_named_only_as_a_path() {
        assert_eq!(
            named_guarded_path("while :; do echo 1 > /logs/verifier/reward.json; done"),
            Some("/logs/verifier/reward.json".to_owned())
        );
        assert_eq!(
            named_guarded_path("cat >/tests/conftest.py <<EOF"),
            Some("/tests/conftest.py".to_owned())
        );
        assert_eq!(
            named_guarded_path("pytest /tests"),
            Some("/tests".to_owned())
        );
        assert_eq!(named_guarded_path("ls /app/tests /srv/testsuite"), None);
        assert_eq!(named_guarded_path("cat /logs/verifier2/x"), None);
        assert_eq!(
            named_guarded_path("echo x > '/conftest.py'"),
            Some("/conftest.py".to_owned())
        );
        assert_eq!(named_guarded_path("vim ./pytest.ini"), None);
    }
}
