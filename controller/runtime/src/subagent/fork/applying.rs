//! Applying a forked child's changes to the parent's workspace: a plan of the parent's
//! commands and uploads made from the changes, then run; paths that are not plain are
//! refused, and set-id bits are never set.

use std::fmt::Write as _;
use std::path::Path;

use sandbox_protocol::{BashArgs, ChangeKind, EntryKind};

use crate::sandbox::SandboxClient;
use harness_log::{ChangeRecord, VersionRecord};

/// A relative path of plain names: nothing a quoted shell word or the files API could take
/// outside the workspace.
pub(super) fn safe_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && path.split('/').all(|part| !matches!(part, "" | "." | ".."))
}

/// A shell word that is exactly `text`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Applies `changes` (in path order) to `parent`: deletions and folders, then files, then
/// symlinks and modes; new files' bytes are the blobs of the log in `log_dir`, each checked
/// against its name. A change with a path that is not plain (see [`safe_path`]) is refused.
/// Set-user-id and set-group-id bits are never applied: each one left out is a note returned.
pub async fn apply(
    changes: &[ChangeRecord],
    parent: &SandboxClient,
    log_dir: &Path,
) -> Result<Vec<String>, String> {
    let plan = Plan::of(changes)?;
    // Every new file's bytes must be in the log before anything changes, so a missing blob
    // (a file over the sandbox's blob limit) refuses the merge instead of leaving half of it.
    for (path, version) in &plan.files {
        let sha256 = version.sha256.as_deref().unwrap_or_default();
        harness_log::reader::open_blob(log_dir, sha256)
            .map_err(|err| format!("{path}: its content {sha256} is not in the log: {err}"))?;
    }
    run_script(parent, &plan.before).await?;
    for (path, version) in plan.files {
        let bytes = blob_bytes(log_dir, version)?;
        parent
            .put_file(path, bytes, Some(version.mode & KEPT_MODE))
            .await
            .map_err(|err| format!("{path}: {err}"))?;
    }
    run_script(parent, &plan.after).await?;
    Ok(plan.notes)
}

/// A merge as the parent's commands and uploads: a script run before the files are written
/// (deletions, folders), the files, a script after (modes, symlinks), and what was left out.
struct Plan<'a> {
    before: String,
    files: Vec<(&'a str, &'a VersionRecord)>,
    after: String,
    notes: Vec<String>,
}

impl<'a> Plan<'a> {
    fn of(changes: &'a [ChangeRecord]) -> Result<Plan<'a>, String> {
        if let Some(bad) = changes.iter().find(|c| !safe_path(&c.path)) {
            return Err(format!("{}: not a plain relative path", bad.path));
        }
        let mut plan = Plan {
            before: String::new(),
            files: Vec::new(),
            after: String::new(),
            notes: Vec::new(),
        };
        // The last path removed whole: what lies under it goes with it (changes are in path
        // order), so deleting a tree of thousands of files is one line.
        let mut removed: Option<&str> = None;
        for change in changes {
            let path = quote(&change.path);
            let replaced = matches!(change.change, ChangeKind::Deleted | ChangeKind::TypeChanged);
            let under_removed = removed.is_some_and(|gone| {
                change.path.len() > gone.len()
                    && change.path.starts_with(gone)
                    && change.path.as_bytes()[gone.len()] == b'/'
            });
            if replaced && !under_removed {
                let _ = writeln!(plan.before, "rm -rf -- {path}");
                removed = Some(&change.path);
            }
            let Some(new) = &change.after else { continue };
            plan.add(change, new, &path);
        }
        Ok(plan)
    }

    /// What makes `change`'s new version, `new`, at `path` (quoted).
    fn add(&mut self, change: &'a ChangeRecord, new: &'a VersionRecord, path: &str) {
        if new.mode & SET_ID != 0 {
            self.notes.push(format!(
                "{}: mode {:04o} applied as {:04o} (set-user-id and set-group-id bits are never set)",
                change.path,
                new.mode & 0o7777,
                new.mode & KEPT_MODE
            ));
        }
        let mode = format!("{:o}", new.mode & KEPT_MODE);
        match (new.kind, change.change) {
            (EntryKind::Dir, ChangeKind::ModeChanged)
            | (EntryKind::File, ChangeKind::ModeChanged) => {
                let _ = writeln!(self.after, "chmod {mode} -- {path}");
            }
            (EntryKind::Dir, _) => {
                let _ = writeln!(self.before, "mkdir -p -- {path} && chmod {mode} -- {path}");
            }
            (EntryKind::File, _) => self.files.push((change.path.as_str(), new)),
            (EntryKind::Symlink, _) => {
                let target = new.target.as_deref().unwrap_or_default();
                let _ = writeln!(self.after, "ln -sfn -- {} {path}", quote(target));
            }
            (EntryKind::Other, _) => {}
        }
    }
}

/// The set-user-id and set-group-id bits, which a merge never sets.
const SET_ID: u32 = 0o6000;
/// The mode bits a merge sets.
const KEPT_MODE: u32 = 0o1777;

/// The most of a script one `bash` call takes: Linux caps one argument of a command at 128 KiB,
/// so a long script runs as several, each of whole lines, in order.
const SCRIPT_CHUNK: usize = 96 * 1024;

async fn run_script(parent: &SandboxClient, script: &str) -> Result<(), String> {
    let mut chunk = String::new();
    for line in script.lines() {
        if !chunk.is_empty() && chunk.len() + line.len() + 1 > SCRIPT_CHUNK {
            run_lines(parent, &chunk).await?;
            chunk.clear();
        }
        chunk.push_str(line);
        chunk.push('\n');
    }
    run_lines(parent, &chunk).await
}

async fn run_lines(parent: &SandboxClient, script: &str) -> Result<(), String> {
    if script.is_empty() {
        return Ok(());
    }
    let args = BashArgs {
        cmd: format!("set -e\n{script}"),
        timeout: Some(120),
    };
    let result = parent.bash(&args).await.map_err(|err| err.to_string())?;
    match result.exit_code {
        0 => Ok(()),
        code => Err(format!("exit {code}: {}", result.output.trim())),
    }
}

/// A file version's bytes from the blobs of the log in `log_dir`.
pub(super) fn blob_bytes(log_dir: &Path, version: &VersionRecord) -> Result<Vec<u8>, String> {
    let sha256 = version.sha256.as_deref().unwrap_or_default();
    harness_log::reader::read_blob(log_dir, sha256)
        .map_err(|err| format!("the child's file {sha256} is not in the log: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_applied_and_words_are_quoted() {
        assert!(safe_path("a/b.txt"));
        for bad in ["", "/etc/passwd", "a/../b", "./a", "a//b", "..", "a/."] {
            assert!(!safe_path(bad), "{bad}");
        }
        assert_eq!(quote("it's $(x)"), r"'it'\''s $(x)'");
    }

    /// Issue 55: a forked child's merge replayed its modes, set-id bits included, as the
    /// parent's commands; they are left out now, and each is named.
    #[test]
    fn a_merge_never_sets_a_set_id_bit_and_says_so() {
        let version = |kind, mode| VersionRecord {
            kind,
            size: 1,
            mode,
            sha256: Some("00".repeat(32)),
            target: None,
        };
        let change = |path: &str, change, after| ChangeRecord {
            path: path.to_owned(),
            change,
            before: None,
            after: Some(after),
        };
        let changes = vec![
            change("d", ChangeKind::Added, version(EntryKind::Dir, 0o2777)),
            change(
                "tool",
                ChangeKind::ModeChanged,
                version(EntryKind::File, 0o104755),
            ),
            change("new", ChangeKind::Added, version(EntryKind::File, 0o6755)),
            change(
                "plain",
                ChangeKind::ModeChanged,
                version(EntryKind::File, 0o100644),
            ),
        ];
        let plan = Plan::of(&changes).unwrap();
        assert_eq!(plan.before, "mkdir -p -- 'd' && chmod 777 -- 'd'\n");
        assert_eq!(plan.after, "chmod 755 -- 'tool'\nchmod 644 -- 'plain'\n");
        assert_eq!(plan.files.len(), 1);
        assert_eq!(plan.notes.len(), 3, "{:?}", plan.notes);
        assert!(
            plan.notes[1].contains("tool: mode 4755 applied as 0755"),
            "{:?}",
            plan.notes
        );
    }
}
