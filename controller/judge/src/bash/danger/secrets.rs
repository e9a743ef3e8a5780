//! Secrets: credential locations a command reads (a path, a folder walked, a redirect), secret
//! variables it expands, and the environment printed whole.

use super::super::options::{self, has_long, has_short};
use super::super::{Command, Cwd};
use super::{Findings, is_metadata, secret_variable};
use crate::paths::{self, normalize};
use crate::shell::Word;

/// The credential a word could reach: as a whole, after an `=` (`--opt=PATH`), after an `@`
/// (`-d @PATH`), after `file://`. A relative path that stays inside the workspace names the
/// workspace's own files (`tests/fixtures/.ssh`), not the home's.
fn reaches(word: &Word, cwd: &Cwd) -> Option<String> {
    let text = word.text();
    let mut candidates = Vec::new();
    if let Some((_, value)) = text.split_once("file://") {
        candidates.push(value);
    }
    if let Some((_, value)) = text.split_once('@') {
        candidates.push(value);
    }
    if let Some((_, value)) = text.split_once('=') {
        candidates.push(value);
    }
    candidates.push(text);
    candidates
        .into_iter()
        .filter(|candidate| !inside_workspace(candidate, cwd))
        .flat_map(|candidate| from_cwd(candidate, cwd))
        .find_map(|candidate| match word {
            Word::Static(_) => paths::credential_path(&candidate),
            Word::Dynamic { .. } => paths::credential_reached(&candidate),
        })
}

/// A relative path as the places it may be: joined to a known folder outside the workspace;
/// from an unknown folder, as written and as from the root and from a home (a shell that
/// `cd ~` before, which the rules did not see).
fn from_cwd(candidate: &str, cwd: &Cwd) -> Vec<String> {
    let relative = {
        let path = candidate.trim_matches(['"', '\'']);
        !path.is_empty() && !path.starts_with(['/', '~', '$', '`'])
    };
    match cwd {
        Cwd::At(folder) if relative => vec![format!("{folder}/{candidate}")],
        Cwd::Elsewhere | Cwd::Unknown if relative => vec![
            candidate.to_owned(),
            format!("/{candidate}"),
            format!("~/{candidate}"),
            format!("/proc/{candidate}"),
        ],
        _ => vec![candidate.to_owned()],
    }
}

/// Whether a path is relative, has nothing that expands elsewhere, and stays inside.
fn inside_workspace(candidate: &str, cwd: &Cwd) -> bool {
    let Cwd::Inside(folder) = cwd else {
        return false;
    };
    let path = candidate.trim_matches(['"', '\'']);
    if path.is_empty()
        || path.starts_with(['/', '~'])
        || path.contains(['$', '`'])
        || path.contains("://")
    {
        return false;
    }
    let resolved = normalize(&format!("{folder}/{path}"));
    resolved != ".." && !resolved.starts_with("../")
}

/// Credential locations read, listed or written: by a word, a walk of folders, an
/// assignment or a redirect.
pub(super) fn credentials(command: &Command, out: &mut Findings) {
    let patterns = options::pattern_positions(&command.argv);
    let metadata = is_metadata(command);
    let printing = matches!(command.program(), Some("echo" | "printf"));
    for (index, word) in command.argv.iter().enumerate() {
        // `printf '%s\n' 'cat ~/.ssh/id_rsa'` prints a sentence; it reads nothing.
        let sentence = printing
            && word
                .as_static()
                .is_some_and(|t| t.contains(char::is_whitespace));
        if patterns.contains(&index) || sentence {
            continue;
        }
        if let Some(place) = reaches(word, &command.cwd) {
            if command.program() == Some("cd") {
                out.deny(format!("enters a credential location ({place})"));
            } else if metadata {
                out.ask(format!("lists a credential location ({place})"));
            } else {
                out.deny(format!("reads a credential location ({place})"));
            }
        } else if let Some(walked) = recursive_reach(command, index, word) {
            walked.judge(metadata, out);
        }
    }
    // A walker given no folder walks the one it runs in (`cd ~ && rg -uu KEY`).
    if !command
        .argv
        .iter()
        .enumerate()
        .any(|(i, w)| operand(command, &patterns, i, w))
        && let Some(walked) = walks(command)
            .then(|| walked_store(".", &command.cwd))
            .flatten()
    {
        walked.judge(metadata, out);
    }
    for (_, value) in &command.assignments {
        if let Some(place) = reaches(value, &command.cwd) {
            out.deny(format!("reads a credential location ({place})"));
        }
    }
    for redirect in &command.redirects {
        if redirect.heredoc.is_some() {
            continue;
        }
        if let Some(place) = reaches(&redirect.target, &command.cwd) {
            if redirect.reads() {
                out.deny(format!("reads a credential location ({place})"));
            } else {
                out.ask(format!("writes into a credential location ({place})"));
            }
        }
    }
}

/// A folder holding credentials that a command which walks folders is given (`grep -r KEY ~`,
/// or `.` after `cd ~`): surely (deny), or maybe, from a folder the rules do not know (ask).
enum Walked {
    Surely(String),
    Maybe(String),
}

impl Walked {
    fn judge(self, metadata: bool, out: &mut Findings) {
        match (self, metadata) {
            (Walked::Surely(place), true) => {
                out.ask(format!("lists a folder that holds credentials ({place})"));
            }
            (Walked::Surely(place), false) => {
                out.deny(format!("reads a folder that holds credentials ({place})"));
            }
            (Walked::Maybe(place), _) => out.ask(format!(
                "walks a folder the rules cannot place, which may hold credentials ({place}, if it is a home)"
            )),
        }
    }
}

/// Whether the command walks the folders it is given.
fn walks(command: &Command) -> bool {
    let args = command.args();
    match command.program() {
        Some("grep" | "egrep" | "fgrep") => {
            has_short(args, 'r', "efmABCdD")
                || has_short(args, 'R', "efmABCdD")
                || has_long(args, "--recursive")
        }
        Some("cp" | "scp") => {
            has_short(args, 'r', "")
                || has_short(args, 'R', "")
                || has_short(args, 'a', "")
                || has_long(args, "--recursive")
        }
        Some("ls") => has_short(args, 'R', "") || has_long(args, "--recursive"),
        Some(
            "rg" | "ag" | "ack" | "tar" | "zip" | "7z" | "rsync" | "find" | "du" | "tree"
            | "rclone" | "ln" | "fd" | "fdfind",
        ) => true,
        _ => false,
    }
}

/// Whether the word at `index` is a path the command is given: not the program, an option, a
/// pattern, nor an option's value.
fn operand(command: &Command, patterns: &[usize], index: usize, word: &Word) -> bool {
    if index == 0 || patterns.contains(&index) || word.text().starts_with('-') {
        return false;
    }
    let previous = command.argv[index - 1].text();
    let valued = [
        "-m", "-A", "-B", "-C", "-d", "-D", "-g", "-t", "-T", "-j", "-M", "-E", "-f",
    ];
    !valued.contains(&previous)
}

/// A folder holding credentials given to a command that walks folders.
fn recursive_reach(command: &Command, index: usize, word: &Word) -> Option<Walked> {
    if index == 0 || word.text().starts_with('-') || !walks(command) {
        return None;
    }
    walked_store(word.text(), &command.cwd)
}

/// The credential store a walk from `operand` reaches, the operand joined to the command's
/// folder as the shell would: known (`cd ~ && grep -r . .`), inside the workspace (its own
/// files), or from a folder the rules do not know (then as from a home, and from the root).
fn walked_store(operand: &str, cwd: &Cwd) -> Option<Walked> {
    let text = operand.trim_matches(['"', '\'']);
    let relative = !text.is_empty() && !text.starts_with(['/', '~', '$', '`']);
    if !relative {
        return paths::credential_ancestor(operand).map(Walked::Surely);
    }
    let unknown_from = |path: &str| {
        let rest = path.trim_start_matches("../").trim_start_matches("..");
        [format!("~/{rest}"), format!("/{rest}")]
            .iter()
            .find_map(|candidate| paths::credential_ancestor(candidate))
            .map(Walked::Maybe)
    };
    match cwd {
        Cwd::Inside(folder) => {
            let joined = normalize(&format!("{folder}/{text}"));
            if joined == ".." || joined.starts_with("../") {
                unknown_from(&joined)
            } else {
                None
            }
        }
        Cwd::At(folder) => {
            paths::credential_ancestor(&normalize(&format!("{folder}/{text}"))).map(Walked::Surely)
        }
        Cwd::Elsewhere | Cwd::Unknown => unknown_from(&normalize(text)),
    }
}

/// `$API_KEY`, `${GITHUB_TOKEN}` and the like, anywhere in the command.
pub(super) fn secret_variables(command: &Command, out: &mut Findings) {
    let words = command
        .argv
        .iter()
        .chain(command.assignments.iter().map(|(_, v)| v))
        .chain(command.redirects.iter().map(|r| &r.target));
    for word in words {
        if let Word::Dynamic { raw, .. } = word
            && let Some(name) = secret_variable(raw)
        {
            out.deny(format!("reads a secret variable (${name})"));
        }
    }
    for redirect in &command.redirects {
        if redirect.heredoc_dynamic
            && let Some(name) = redirect.heredoc.as_deref().and_then(secret_variable)
        {
            out.deny(format!("reads a secret variable (${name})"));
        }
    }
}

/// `env`, `printenv`, `set`, `declare -x`, `export -p`: the whole environment printed.
pub(super) fn environment_dump(command: &Command, out: &mut Findings) {
    let args = command.args();
    let flags_only = |allowed: &str| {
        args.iter().all(|w| {
            let t = w.text();
            t.starts_with('-') && t[1..].chars().all(|c| allowed.contains(c))
        })
    };
    let dumps = match command.program() {
        Some("printenv") => true,
        // A peeled `env` that is still `env` runs no command: it prints.
        Some("env") => !args
            .iter()
            .any(|w| matches!(w.text(), "-S" | "--split-string")),
        Some("set") => args.is_empty(),
        Some("export") => args.is_empty() || flags_only("p"),
        Some("declare" | "typeset" | "local" | "readonly") => {
            args.is_empty()
                || (flags_only("xpgr") && args.iter().any(|w| w.text().contains(['x', 'p'])))
        }
        Some("compgen") => args
            .iter()
            .any(|w| matches!(w.text(), "-v" | "-e" | "variable" | "export")),
        _ => false,
    };
    if dumps {
        out.deny("prints the environment, which holds secrets");
    }
}
