//! The built-in checks over a parsed line: what is denied (credentials read, the environment
//! dumped, destruction beyond the workspace, downloaded code run, data sent away, devices
//! written) and what needs a person (deletion inside it, writes outside it or into `.git`,
//! programs set through git config or the environment).
//!
//! Commands found only in data (an `echo`'s text, a comment) are checked for denials only.

mod delete;
mod exfil;
mod network;

pub use network::plants_download_and_run;

use super::options::{self, has_long, has_short};
use super::peel::runs_code;
use super::{Command, Cwd, Line, git};
use crate::paths::{self, normalize};
use crate::shell::Word;
use harness_log::Verdict;

/// A verdict and what gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    /// e.g. `built-in: reads a credential location (~/.ssh)`.
    pub provenance: String,
}

/// Collects findings; asks from data are dropped.
pub(super) struct Findings {
    pub found: Vec<Finding>,
    running: bool,
}

impl Findings {
    pub(super) fn deny(&mut self, why: impl AsRef<str>) {
        self.push(Verdict::Deny, why.as_ref());
    }

    pub(super) fn ask(&mut self, why: impl AsRef<str>) {
        if self.running {
            self.push(Verdict::Ask, why.as_ref());
        }
    }

    fn push(&mut self, verdict: Verdict, why: &str) {
        let provenance = format!("built-in: {why}");
        if !self.found.iter().any(|f| f.provenance == provenance) {
            self.found.push(Finding {
                verdict,
                provenance,
            });
        }
    }
}

/// Every built-in finding for a line.
pub fn findings(line: &Line) -> Vec<Finding> {
    let mut out = Findings {
        found: Vec::new(),
        running: true,
    };
    for command in &line.commands {
        out.running = command.runs(line);
        credentials(command, &mut out);
        secret_variables(command, &mut out);
        environment_dump(command, &mut out);
        delete::check(command, &mut out);
        devices(command, &mut out);
        git_checks(command, &mut out);
        exfil::uploads(command, &mut out);
        exfil::socket_redirects(command, &mut out);
        writes(command, &mut out);
    }
    network::download_and_run(line, &mut out);
    exfil::pushes(line, &mut out);
    exfil::sockets_in_code(line, &mut out);
    out.found
}

/// Programs that show names and metadata, not contents.
fn is_metadata(command: &Command) -> bool {
    match command.program() {
        Some("du") => !has_long(command.args(), "--files0-from"),
        Some("rg") => command
            .args()
            .iter()
            .any(|w| matches!(w.text(), "--files" | "--type-list")),
        Some("fd" | "fdfind") => true,
        Some(p) => matches!(
            p,
            "ls" | "stat"
                | "test"
                | "["
                | "find"
                | "tree"
                | "file"
                | "realpath"
                | "readlink"
                | "basename"
                | "dirname"
                | "which"
                | "mkdir"
                | "echo"
                | "printf"
        ),
        None => false,
    }
}

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

fn credentials(command: &Command, out: &mut Findings) {
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
fn secret_variables(command: &Command, out: &mut Findings) {
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

/// The first variable in `text` whose name says it holds a secret.
pub(crate) fn secret_variable(text: &str) -> Option<String> {
    const MARKS: &[&str] = &[
        "API_KEY",
        "APIKEY",
        "SECRET",
        "TOKEN",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "PRIVATE_KEY",
        "ACCESS_KEY",
        "_KEY",
    ];
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = text[at..].find('$') {
        let start = at + found + 1;
        let skip = usize::from(bytes.get(start) == Some(&b'{'));
        let name: String = text[start + skip..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let upper = name.to_ascii_uppercase();
        if MARKS.iter().any(|mark| upper.contains(mark)) {
            return Some(name);
        }
        at = start;
    }
    None
}

/// `env`, `printenv`, `set`, `declare -x`, `export -p`: the whole environment printed.
fn environment_dump(command: &Command, out: &mut Findings) {
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

/// Disks and kernel memory: formatted, overwritten.
fn devices(command: &Command, out: &mut Findings) {
    let program = command.program().unwrap_or_default();
    if program.starts_with("mkfs") || program.starts_with("mkswap") {
        out.deny(format!("formats a device ({program})"));
    }
    let device = |word: &Word| paths::device_reached(word.text().trim_start_matches("of="));
    let operand_device = command.args().iter().find_map(device);
    if matches!(
        program,
        "wipefs" | "fdisk" | "sfdisk" | "parted" | "blkdiscard" | "shred" | "sgdisk"
    ) && let Some(device) = &operand_device
    {
        out.deny(format!("rewrites a disk ({program}: {device})"));
    }
    for target in write_targets(command) {
        if let Some(device) = device(target) {
            out.deny(format!("writes {device}"));
        }
    }
    // Reading: every operand a program that reads contents takes (not a search pattern), an
    // `if=`, a reading redirect. Listing names (`ls /dev`, `stat /dev/sda`) reads none.
    if is_metadata(command) {
        return;
    }
    let patterns = options::pattern_positions(&command.argv);
    let read = command
        .argv
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(index, _)| !patterns.contains(index))
        .map(|(_, word)| word)
        .chain(
            command
                .redirects
                .iter()
                .filter(|r| r.reads() && r.heredoc.is_none())
                .map(|r| &r.target),
        )
        .find_map(|word| paths::device_reached(word.text().trim_start_matches("if=")));
    if let Some(device) = read {
        out.deny(format!("reads {device}"));
    }
}

fn git_checks(command: &Command, out: &mut Findings) {
    if command.program() == Some("git") {
        let global = git::global(&command.argv);
        let sub = global
            .sub
            .map(|at| command.argv[at].text())
            .unwrap_or_default();
        let next = global
            .sub
            .and_then(|at| command.argv.get(at + 1))
            .map(Word::text)
            .unwrap_or_default();
        if sub.starts_with("credential") && (sub != "credential" || matches!(next, "fill" | "get"))
        {
            out.deny("asks git for stored credentials");
        }
        if let Some(key) = git::sets_program(command) {
            out.ask(format!("sets git config {key}, which runs a program"));
        }
    }
    if let Some(program) = command.program()
        && program.starts_with("git-credential")
    {
        out.deny("asks git for stored credentials");
    }
    for (name, _) in &command.assignments {
        if runs_code(name) {
            out.ask(format!("sets {name}, which names a program to run"));
        }
    }
}

/// Where a command writes, by redirect or by its arguments.
fn write_targets(command: &Command) -> Vec<&Word> {
    let mut targets: Vec<&Word> = command
        .redirects
        .iter()
        .filter(|r| !r.reads() && !r.op.contains('&') || matches!(r.op.as_str(), "&>" | "&>>"))
        .map(|r| &r.target)
        .collect();
    let args = command.args();
    let operands: Vec<&Word> = options::operands(args, &[])
        .into_iter()
        .map(|(_, w)| w)
        .collect();
    match command.program().unwrap_or_default() {
        "tee" | "touch" | "mkdir" | "truncate" | "chmod" | "chown" | "chgrp" | "rmdir"
        | "shred" => targets.extend(operands),
        "cp" | "mv" | "install" | "ln" | "rsync" => targets.extend(operands.last()),
        "sed" | "perl" if has_short(args, 'i', "efI") || has_long(args, "--in-place") => {
            targets.extend(operands.into_iter().skip(1))
        }
        "dd" => targets.extend(args.iter().filter(|w| w.text().starts_with("of="))),
        _ => {}
    }
    targets
}

/// Writes outside the workspace, into `.git` or `.github`.
fn writes(command: &Command, out: &mut Findings) {
    for target in write_targets(command) {
        let text = target.text().trim_start_matches("of=");
        if let Some(why) = outside(text, &command.cwd) {
            out.ask(format!("writes outside the workspace ({why})"));
        }
        if let Some(place) = repository_metadata(text) {
            out.ask(format!("writes into {place}"));
        }
    }
}

/// Why a written path is outside the workspace, if it is; scratch and null devices are not.
fn outside(text: &str, cwd: &Cwd) -> Option<String> {
    let unquoted = text.trim_matches('"');
    if unquoted.starts_with('~') || unquoted.starts_with("$HOME") || unquoted.starts_with("${HOME}")
    {
        return Some(text.to_owned());
    }
    if unquoted.starts_with('/') {
        let path = normalize(unquoted);
        let harmless = ["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"]
            .contains(&path.as_str())
            || ["/dev/fd/", "/tmp/", "/var/tmp/"]
                .iter()
                .any(|p| path.starts_with(p));
        return (!harmless).then_some(path);
    }
    match cwd {
        Cwd::Inside(folder) => {
            let path = normalize(&format!("{folder}/{unquoted}"));
            (path == ".." || path.starts_with("../")).then(|| text.to_owned())
        }
        Cwd::At(folder) => {
            let path = normalize(&format!("{folder}/{unquoted}"));
            let harmless = ["/tmp/", "/var/tmp/"].iter().any(|p| path.starts_with(p));
            (!harmless).then_some(path)
        }
        Cwd::Elsewhere => Some(format!("{text}, after a cd")),
        Cwd::Unknown => Some(format!("{text}, from a folder the sandbox did not say")),
    }
}

/// `.git/…` or `.github/…` (any case: case-insensitive file systems merge them), at any depth.
pub fn repository_metadata(path: &str) -> Option<&'static str> {
    let path = normalize(path.trim_matches('"'));
    let components: Vec<&str> = path.split('/').collect();
    for (index, component) in components.iter().enumerate() {
        if component.eq_ignore_ascii_case(".git") {
            return Some(".git");
        }
        if component.eq_ignore_ascii_case(".github") && index + 1 < components.len() {
            return Some(".github");
        }
    }
    None
}
