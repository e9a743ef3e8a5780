//! A change list as one unified diff, git style (`GET /v1/workspace/diff`): a header per path
//! (`diff --git`, new, deleted and mode lines), the content's hunks from the kept blobs, a
//! binary file or one too large to show said in a line, and the whole answer bounded.

use std::io::Read;

use base64::Engine;
use sandbox_protocol::{ChangeKind, EntryKind, FileChange, FileVersion};

use crate::sandbox::blobs::BlobStore;

/// The most of one side of a file that is compared; a larger one is said, not shown.
pub const MAX_SIDE_BYTES: u64 = 512 * 1024;

/// The diff of `changes` (files and symlinks; folders carry no content) and whether it was cut
/// at `max_bytes`, with a last line saying how many changes were left out.
pub fn unified(changes: &[FileChange], blobs: &BlobStore, max_bytes: usize) -> (String, bool) {
    let shown: Vec<&FileChange> = changes.iter().filter(|c| has_content(c)).collect();
    let mut out = String::new();
    for (index, change) in shown.iter().enumerate() {
        let part = file_diff(change, blobs);
        if out.len() + part.len() > max_bytes {
            // As much of this file as fits, cut at a line's end.
            let room = max_bytes.saturating_sub(out.len());
            let mut cut = room.min(part.len());
            while !part.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = part[..cut].rfind('\n').map_or(0, |at| at + 1);
            out.push_str(&part[..cut]);
            let left = shown.len() - index;
            out.push_str(&format!(
                "# diff truncated at max_bytes={max_bytes}: {left} of {} changed files not shown whole\n",
                shown.len()
            ));
            return (out, true);
        }
        out.push_str(&part);
    }
    (out, false)
}

/// Whether a change has lines a diff shows: a file's or a symlink's on either side.
fn has_content(change: &FileChange) -> bool {
    let shows = |version: &Option<FileVersion>| {
        version
            .as_ref()
            .is_some_and(|v| matches!(v.kind, EntryKind::File | EntryKind::Symlink))
    };
    shows(&change.before) || shows(&change.after)
}

/// One path's part: its header, then its hunks or a line saying why there are none.
fn file_diff(change: &FileChange, blobs: &BlobStore) -> String {
    let name = quoted(change);
    let (before, after) = (shown(&change.before), shown(&change.after));
    let mut out = format!("diff --git a/{name} b/{name}\n");
    match (before, after) {
        (None, Some(new)) => out.push_str(&format!("new file mode {}\n", git_mode(new))),
        (Some(old), None) => out.push_str(&format!("deleted file mode {}\n", git_mode(old))),
        (Some(old), Some(new)) if git_mode(old) != git_mode(new) => out.push_str(&format!(
            "old mode {}\nnew mode {}\n",
            git_mode(old),
            git_mode(new)
        )),
        _ => {}
    }
    if change.change == ChangeKind::ModeChanged {
        return out;
    }
    let from = before.map_or("/dev/null".to_owned(), |_| format!("a/{name}"));
    let to = after.map_or("/dev/null".to_owned(), |_| format!("b/{name}"));
    match (side(before, blobs), side(after, blobs)) {
        (Ok(old), Ok(new)) => out.push_str(
            &similar::TextDiff::configure()
                .timeout(std::time::Duration::from_secs(1))
                .diff_lines(&old, &new)
                .unified_diff()
                .context_radius(3)
                .header(&from, &to)
                .to_string(),
        ),
        (Err(Unshown::Binary), _) | (_, Err(Unshown::Binary)) => {
            out.push_str(&format!("Binary files {from} and {to} differ\n"));
        }
        (Err(why), _) | (_, Err(why)) => {
            out.push_str(&format!("# {name}: content not shown: {}\n", why.words()));
        }
    }
    out
}

/// A version whose content a diff shows (a folder's or a FIFO's is none).
fn shown(version: &Option<FileVersion>) -> Option<&FileVersion> {
    version
        .as_ref()
        .filter(|v| matches!(v.kind, EntryKind::File | EntryKind::Symlink))
}

/// Why one side's lines are not shown.
enum Unshown {
    Binary,
    TooLarge,
    NotKept,
}

impl Unshown {
    fn words(&self) -> String {
        match self {
            Unshown::Binary => "binary".to_owned(),
            Unshown::TooLarge => format!("a side is over {MAX_SIDE_BYTES} bytes"),
            Unshown::NotKept => "a version is not kept (over --blob-max-file-bytes)".to_owned(),
        }
    }
}

/// One side's text: a symlink's target, a file's content from its blob, or nothing.
fn side(version: Option<&FileVersion>, blobs: &BlobStore) -> Result<String, Unshown> {
    let Some(version) = version else {
        return Ok(String::new());
    };
    if version.kind == EntryKind::Symlink {
        return Ok(version.target.clone().unwrap_or_default());
    }
    if version.size > MAX_SIDE_BYTES {
        return Err(Unshown::TooLarge);
    }
    let path = version
        .sha256
        .as_deref()
        .and_then(|sha| blobs.path(sha))
        .ok_or(Unshown::NotKept)?;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SIDE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|_| Unshown::NotKept)?;
    if bytes.contains(&0) {
        return Err(Unshown::Binary);
    }
    String::from_utf8(bytes).map_err(|_| Unshown::Binary)
}

/// Git's mode of a version: a symlink's, or a file's permission bits.
fn git_mode(version: &FileVersion) -> String {
    match version.kind {
        EntryKind::Symlink => "120000".to_owned(),
        _ => format!("100{:03o}", version.mode & 0o777),
    }
}

/// The path as git writes it: as it is when plain, else in quotes with C escapes (a name that
/// is not UTF-8 by its exact bytes).
fn quoted(change: &FileChange) -> String {
    let bytes = change
        .path_b64
        .as_deref()
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .unwrap_or_else(|| change.path.as_bytes().to_vec());
    let plain = |b: &u8| b.is_ascii_graphic() && *b != b'"' && *b != b'\\' || *b == b' ';
    if bytes.iter().all(plain) {
        return String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut out = String::from("\"");
    for byte in bytes {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            byte if plain(&byte) => out.push(char::from(byte)),
            byte => out.push_str(&format!("\\{byte:03o}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(kind: EntryKind, mode: u32, target: Option<&str>) -> FileVersion {
        FileVersion {
            kind,
            size: 0,
            mode,
            sha256: None,
            target: target.map(str::to_owned),
        }
    }

    #[test]
    fn names_are_quoted_as_git_quotes_them() {
        let change = |path: &str, path_b64: Option<&str>| FileChange {
            path: path.to_owned(),
            path_b64: path_b64.map(str::to_owned),
            change: ChangeKind::Added,
            before: None,
            after: None,
        };
        assert_eq!(quoted(&change("src/a b.rs", None)), "src/a b.rs");
        assert_eq!(quoted(&change("tab\there", None)), "\"tab\\there\"");
        // The bytes `a`, 0xff, `b`, which are no UTF-8.
        assert_eq!(quoted(&change("a\u{fffd}b", Some("Yf9i"))), "\"a\\377b\"");
    }

    #[test]
    fn a_symlink_is_its_target_and_a_mode_change_has_no_hunks() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path(), 1024).unwrap();
        let link = FileChange {
            path: "link".to_owned(),
            path_b64: None,
            change: ChangeKind::Modified,
            before: Some(version(EntryKind::Symlink, 0o777, Some("old"))),
            after: Some(version(EntryKind::Symlink, 0o777, Some("new"))),
        };
        let (text, cut) = unified(std::slice::from_ref(&link), &blobs, 1 << 20);
        assert!(!cut);
        assert!(
            text.starts_with("diff --git a/link b/link\n--- a/link\n+++ b/link\n"),
            "{text}"
        );
        assert!(text.contains("-old\n") && text.contains("+new\n"), "{text}");
        let mode = FileChange {
            path: "run.sh".to_owned(),
            path_b64: None,
            change: ChangeKind::ModeChanged,
            before: Some(version(EntryKind::File, 0o644, None)),
            after: Some(version(EntryKind::File, 0o755, None)),
        };
        let (text, _) = unified(&[mode], &blobs, 1 << 20);
        assert_eq!(
            text,
            "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
        );
        let (text, cut) = unified(&[link], &blobs, 30);
        assert!(cut);
        assert!(
            text.starts_with("diff --git a/link b/link\n# diff truncated at max_bytes=30: 1 of 1"),
            "{text}"
        );
    }
}
