//! A repository's own config (`.git/config`'s text), read for what could make a read-only git
//! command run a program or read more config. A config not in the form `git config` writes is
//! not trusted at all.

use super::is_program_key;

/// Sections a repository's config may have without a read-only git command running anything
/// (their code keys are still checked).
const SAFE_SECTIONS: &[&str] = &[
    "core",
    "remote",
    "branch",
    "user",
    "init",
    "color",
    "gc",
    "pull",
    "push",
    "fetch",
    "merge",
    "rebase",
    "status",
    "log",
    "advice",
    "diff",
    "http",
    "submodule",
    "lfs",
    "extensions",
    "pack",
    "index",
    "feature",
    "rerere",
    "commit",
    "tag",
    "gpg",
    "safe",
    "blame",
    "grep",
    "column",
    "i18n",
    "interactive",
    "receive",
    "transfer",
    "protocol",
    "fsck",
    "format",
    "apply",
    "am",
    "clone",
    "credential",
    "alias",
    "maintenance",
    "checkout",
    "worktree",
    "url",
    "difftool",
    "mergetool",
    "help",
    "gui",
    "web",
    "sparse",
    "splitindex",
    "reset",
    "stash",
    "notes",
];

/// Why a config is not in the form `git config` writes, if it is not: a byte-order mark, text
/// after a section header on its line, a header of another shape, a continued line, an
/// unclosed quote, a line that starts with neither a key nor a header. Git reads such files
/// in ways a line-by-line reading misses (a key after `]` is a key; a continued value hides
/// the next header), so a config that is not canonical is not trusted at all.
fn not_canonical(text: &str) -> Option<String> {
    if text.contains('\u{feff}') {
        return Some("a byte-order mark (git reads the keys after it)".to_owned());
    }
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let shown = || line.chars().take(60).collect::<String>();
        if line.starts_with('[') {
            let Some(end) = line.find(']') else {
                return Some(format!("an unreadable header `{}`", shown()));
            };
            let rest = line[end + 1..].trim_start();
            if !(rest.is_empty() || rest.starts_with('#') || rest.starts_with(';')) {
                return Some(format!("text after a section header `{}`", shown()));
            }
            if !canonical_header(&line[1..end]) {
                return Some(format!(
                    "a section header git reads differently `{}`",
                    shown()
                ));
            }
            continue;
        }
        if !line.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Some(format!("a line that is not a key `{}`", shown()));
        }
        let trailing = line.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            return Some(format!("a continued line `{}`", shown()));
        }
        let quotes = line.matches('"').count() - line.matches("\\\"").count();
        if quotes % 2 == 1 {
            return Some(format!("an unclosed quote `{}`", shown()));
        }
    }
    None
}

/// `name` or `name "sub"` (`name` of letters, digits, `.` and `-`).
fn canonical_header(header: &str) -> bool {
    let (name, sub) = match header.split_once(' ') {
        Some((name, sub)) => (name, Some(sub)),
        None => (header, None),
    };
    let name_ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let sub_ok = sub.is_none_or(|sub| {
        sub.len() >= 2
            && sub.starts_with('"')
            && sub.ends_with('"')
            && !sub[1..sub.len() - 1].contains('"')
    });
    name_ok && sub_ok
}

/// What a repository's config (`.git/config`'s text) has that could make a read-only git
/// command run a program or read more config; `None` when there is nothing.
pub fn repo_config_runs_programs(text: &str) -> Option<String> {
    repo_config_runs_programs_at(text, usize::MAX)
}

/// As [`repo_config_runs_programs`], for a config in a git folder `depth` folders below the
/// workspace root: a relative `core.worktree` that climbs no higher than the root stays in the
/// workspace (a submodule's `worktree = ../../../sub`).
pub fn repo_config_runs_programs_at(text: &str, depth: usize) -> Option<String> {
    if let Some(why) = not_canonical(text) {
        return Some(why);
    }
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let Some(end) = header.find(']') else {
                return Some(format!("an unreadable line `{line}`"));
            };
            let header = &header[..end];
            let (name, sub) = match header.split_once([' ', '\t']) {
                Some((name, sub)) => (name, Some(sub.trim().trim_matches('"'))),
                None => (header, None),
            };
            let name = name.to_ascii_lowercase();
            let base = name.split('.').next().unwrap_or_default().to_owned();
            if !SAFE_SECTIONS.contains(&base.as_str()) {
                return Some(format!("[{header}]"));
            }
            section = match sub {
                Some(sub) => format!("{name}.{sub}"),
                None => name,
            };
            continue;
        }
        let name = line
            .split(|c: char| c == '=' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        let key = format!("{section}.{name}");
        if is_program_key(&key) || key.eq_ignore_ascii_case("extensions.worktreeconfig") {
            return Some(key);
        }
        // `core.worktree` moves the work tree git reads (`git diff` of a home): anything but a
        // plain folder below the repository's is for a person.
        if key.eq_ignore_ascii_case("core.worktree") {
            let value = line
                .split_once('=')
                .map_or("", |(_, v)| v.trim().trim_matches('"'));
            if worktree_leaves(value, depth) {
                return Some(format!("core.worktree = {value}"));
            }
        }
    }
    None
}

/// Whether a `core.worktree` value, read from a git folder `depth` folders below the workspace
/// root, names a folder outside the workspace (or one the rules cannot place).
fn worktree_leaves(value: &str, depth: usize) -> bool {
    if value.is_empty() || value.starts_with(['/', '~', '$', '`']) || value.contains('\\') {
        return true;
    }
    // Normalised, the value keeps at its front the `..` that climb above the git folder.
    let climbs = crate::paths::normalize(value)
        .split('/')
        .take_while(|part| *part == "..")
        .count();
    climbs > depth
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 55: `core.worktree` pointed the allowed `git diff` at the home; a submodule's own
    /// worktree, which climbs to its folder in the workspace, stays allowed.
    #[test]
    fn a_worktree_outside_the_workspace_is_named() {
        let main = "[core]\n\tworktree = /home/op\n";
        assert_eq!(
            repo_config_runs_programs(main).as_deref(),
            Some("core.worktree = /home/op")
        );
        let sub = "[core]\n\tworktree = ../../../lib/sub\n";
        assert_eq!(repo_config_runs_programs_at(sub, 3), None);
        assert!(repo_config_runs_programs_at(sub, 2).is_some());
        assert!(repo_config_runs_programs_at("[core]\nworktree = ../../..\n", 1).is_some());
    }

    /// Issue 24: configs git reads in ways a line-by-line reading misses are not trusted.
    #[test]
    fn configs_that_git_reads_differently_are_not_trusted() {
        for text in [
            "\u{feff}[core]\n\tfsmonitor = ./x.sh\n",
            "[core] fsmonitor = ./x.sh\n",
            "[user] [include] path = ../inc.cfg\n",
            "[core]\n\tdummy = a \\\n[user]\n\tfsmonitor = ./x.sh\n",
            "[core]\n\tname = \"unclosed\n",
            "[core\n",
            " = x\n",
            "[Core \"a\" \"b\"]\n",
        ] {
            assert!(repo_config_runs_programs(text).is_some(), "{text:?}");
        }
        let canonical =
            "[core]\n\tbare = false # a comment\n[remote \"origin\"]\n\turl = \"x y\"\n; note\n";
        assert_eq!(repo_config_runs_programs(canonical), None);
    }

    #[test]
    fn repository_configs_are_read() {
        let clean = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = x\n[branch \"main\"]\n\tremote = origin\n";
        assert_eq!(repo_config_runs_programs(clean), None);
        for (text, found) in [
            ("[core]\n\tfsmonitor = ./x.sh\n", "core.fsmonitor"),
            ("[core]\n\tsshCommand = x\n", "core.sshCommand"),
            ("[diff \"a\"]\n\ttextconv = x\n", "diff.a.textconv"),
            ("[include]\n\tpath = ../x\n", "[include]"),
            ("[filter \"lfs\"]\n\tsmudge = x\n", "[filter \"lfs\"]"),
            ("[trace2]\n\teventTarget = /tmp/x\n", "[trace2]"),
        ] {
            let got = repo_config_runs_programs(text).unwrap();
            assert!(got.eq_ignore_ascii_case(found), "{text}: {got}");
        }
    }
}
