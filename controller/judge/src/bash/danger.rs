//! The built-in checks over a parsed line: what is denied (credentials read, the environment
//! dumped, destruction beyond the workspace, downloaded code run, data sent away, devices
//! written) and what needs a person (deletion inside it, writes outside it or into `.git`,
//! programs set through git config or the environment).
//!
//! Commands found only in data (an `echo`'s text, a comment) are checked for denials only.

mod delete;
mod exfil;
mod network;
mod secrets;
mod writes;

pub use network::plants_download_and_run;
pub use writes::repository_metadata;

use super::options::has_long;
use super::peel::runs_code;
use super::{Command, Line, git};
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
        secrets::credentials(command, &mut out);
        secrets::secret_variables(command, &mut out);
        secrets::environment_dump(command, &mut out);
        delete::check(command, &mut out);
        writes::devices(command, &mut out);
        git_checks(command, &mut out);
        exfil::uploads(command, &mut out);
        exfil::socket_redirects(command, &mut out);
        writes::writes(command, &mut out);
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

/// Git asked for stored credentials, and programs set to run through git config or the
/// environment.
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
