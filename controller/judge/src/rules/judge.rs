//! Judging a `bash` line and a file tool's path against a rule set.

use sandbox_protocol::BuiltIn;

use super::{RuleSet, Ruling, Verdict};
use crate::bash::{self, Command, Line, readonly};
use crate::paths::{credential_path, normalize};

/// Where a line starts, from what the sandbox says of a shell's folder: relative to the
/// workspace root when inside it, absolute otherwise, `?` when it could not say.
fn start(folder: &str) -> bash::Cwd {
    match folder {
        "?" | "" => bash::Cwd::Unknown,
        absolute if absolute.starts_with('/') => bash::Cwd::At(normalize(absolute)),
        relative => {
            let folder = normalize(relative);
            if folder == ".." || folder.starts_with("../") {
                bash::Cwd::Elsewhere
            } else {
                bash::Cwd::Inside(folder)
            }
        }
    }
}

/// Why one command is not allowed by any rule.
enum NotAllowed {
    /// A read-only entry names it, but an option is outside its list: ask.
    Option(String),
    /// Nothing allows it.
    Open(String),
}

impl RuleSet {
    /// `from`: the folder the line runs from, when it is not the workspace root (a persistent
    /// shell's, as the sandbox reports it).
    pub(super) fn bash(&self, source: &str, from: Option<&str>) -> Option<Ruling> {
        let line = match from {
            None => Line::parse(source),
            Some(folder) => Line::parse_from(source, start(folder)),
        };
        let mut findings = if self.builtin {
            bash::findings(&line)
        } else {
            Vec::new()
        };
        let subjects: Vec<(String, String)> = line
            .running()
            .map(|c| (c.canonical(), c.as_written.clone()))
            .collect();
        let matches = |rule: &super::Rule| {
            subjects.iter().any(|(canonical, written)| {
                rule.matches(BuiltIn::Bash.as_str(), canonical, false)
                    || rule.matches(BuiltIn::Bash.as_str(), written, false)
            })
        };
        if let Some(rule) = self
            .deny
            .iter()
            .find(|r| matches(r) || r.matches(BuiltIn::Bash.as_str(), source, false))
        {
            return Some(Ruling::new(Verdict::Deny, format!("rule {}", rule.pattern)));
        }
        if let Some(finding) = findings.iter().find(|f| f.verdict == Verdict::Deny) {
            return Some(Ruling::new(Verdict::Deny, finding.provenance.clone()));
        }
        if let Some(rule) = self.ask.iter().find(|r| matches(r)) {
            return Some(Ruling::new(Verdict::Ask, format!("rule {}", rule.pattern)));
        }
        if let Some(finding) = findings.iter().find(|f| f.verdict == Verdict::Ask) {
            return Some(Ruling::new(Verdict::Ask, finding.provenance.clone()));
        }
        findings.clear();
        self.allowed(&line)
    }

    /// An allow when every command the line runs is allowed; an ask when a read-only entry
    /// names a command but not one of its options; else nothing.
    fn allowed(&self, line: &Line) -> Option<Ruling> {
        let mut names: Vec<String> = Vec::new();
        let mut repositories: Vec<String> = Vec::new();
        let mut operands: Vec<String> = Vec::new();
        let mut open = None;
        for command in line.running() {
            match self.allow_one(command) {
                Ok((name, git)) => {
                    for operand in read_operands(command) {
                        if !operands.contains(&operand) && operands.len() < MAX_OPERANDS {
                            operands.push(operand);
                        }
                    }
                    repositories.extend(git.filter(|f| !repositories.contains(f)));
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                Err(NotAllowed::Option(why)) => {
                    return Some(Ruling::new(Verdict::Ask, format!("read-only {why}")));
                }
                Err(NotAllowed::Open(why)) => {
                    open.get_or_insert(why);
                }
            }
        }
        let writes = line
            .compound_redirects
            .iter()
            .any(|r| !readonly::redirect_is_read_only(r));
        if open.is_some() || names.is_empty() || !line.unknown.is_empty() || writes {
            return None;
        }
        Some(Ruling {
            verdict: Verdict::Allow,
            provenance: names.join(", "),
            repositories,
            operands,
        })
    }

    /// What allows one command: (provenance, the folder git starts from if it is git).
    fn allow_one(&self, command: &Command) -> Result<(String, Option<String>), NotAllowed> {
        match readonly::judge(&self.read_only, command) {
            Ok(Some(entry)) => {
                let name = format!("read-only {}", entry.name());
                if command.program() != Some("git") {
                    return Ok((name, None));
                }
                return match bash::start_folder(command) {
                    // `vendor.git`, `libfoo.git/refs`: git may find a bare repository there,
                    // whose config the workspace's check does not read.
                    Some(folder)
                        if folder
                            .split('/')
                            .any(|part| part.len() > 4 && part.ends_with(".git")) =>
                    {
                        Err(NotAllowed::Option(format!(
                            "git in {folder}, a folder named like a bare repository"
                        )))
                    }
                    Some(folder) => Ok((name, Some(folder))),
                    None => Err(NotAllowed::Open("git outside the workspace".to_owned())),
                };
            }
            Err(readonly::Refusal::Option(option)) => {
                let program = command.program().unwrap_or_default();
                return Err(NotAllowed::Option(format!(
                    "{program}: {option} is not in its list of read-only options"
                )));
            }
            Err(readonly::Refusal::Other(why)) => return Err(NotAllowed::Open(why)),
            Ok(None) => {}
        }
        let clean = !command.substituted
            && command
                .redirects
                .iter()
                .all(readonly::redirect_is_read_only);
        let canonical = command.canonical();
        match self
            .allow
            .iter()
            .find(|r| r.matches(BuiltIn::Bash.as_str(), &canonical, false))
        {
            Some(rule) if clean => Ok((format!("rule {}", rule.pattern), None)),
            _ => Err(NotAllowed::Open(canonical)),
        }
    }

    /// A file tool's path (and the text it writes): credentials, `.git`/`.github`, outside the
    /// workspace, then patterns.
    pub(super) fn file(&self, tool: BuiltIn, path: &str, written: Option<&str>) -> Option<Ruling> {
        let normalized = normalize(path);
        let writes = tool != BuiltIn::ReadFile;
        let tool = tool.as_str();
        if self.builtin
            && let Some(place) = credential_path(path)
        {
            return Some(if writes {
                Ruling::new(
                    Verdict::Ask,
                    format!("built-in: writes into a credential location ({place})"),
                )
            } else {
                Ruling::new(
                    Verdict::Deny,
                    format!("built-in: reads a credential location ({place})"),
                )
            });
        }
        if self.builtin
            && let Some(device) = crate::paths::device_path(path)
        {
            let verb = if writes { "writes" } else { "reads" };
            return Some(Ruling::new(
                Verdict::Deny,
                format!("built-in: {verb} {device}"),
            ));
        }
        if let Some(rule) = self
            .deny
            .iter()
            .find(|r| r.matches(tool, &normalized, true))
        {
            return Some(Ruling::new(Verdict::Deny, format!("rule {}", rule.pattern)));
        }
        if self.builtin {
            let escapes = normalized == ".."
                || normalized.starts_with("../")
                || normalized.starts_with('~')
                || system_path(&normalized);
            let metadata = bash::repository_metadata(&normalized).filter(|_| writes);
            let planted = written.is_some_and(bash::plants_download_and_run);
            if planted && (metadata.is_some() || escapes || normalized.starts_with('/')) {
                return Some(Ruling::new(
                    Verdict::Deny,
                    format!("built-in: plants a download piped to a shell in {normalized}"),
                ));
            }
            if let Some(place) = metadata {
                return Some(Ruling::new(
                    Verdict::Ask,
                    format!("built-in: writes into {place}"),
                ));
            }
            if escapes {
                let verb = if writes { "writes" } else { "reads" };
                return Some(Ruling::new(
                    Verdict::Ask,
                    format!("built-in: {verb} outside the workspace ({normalized})"),
                ));
            }
        }
        if let Some(rule) = self.ask.iter().find(|r| r.matches(tool, &normalized, true)) {
            return Some(Ruling::new(Verdict::Ask, format!("rule {}", rule.pattern)));
        }
        self.allow
            .iter()
            .find(|r| r.matches(tool, &normalized, true))
            .map(|rule| Ruling::new(Verdict::Allow, format!("rule {}", rule.pattern)))
    }
}

/// A path in the system's own folders: outside any workspace (`/workspace`, a temporary
/// folder) a sandbox has.
fn system_path(path: &str) -> bool {
    const SYSTEM: &[&str] = &[
        "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/root", "/home", "/var",
        "/opt", "/proc", "/sys", "/dev", "/srv", "/mnt", "/media", "/run", "/snap",
    ];
    SYSTEM.iter().any(|top| {
        path.strip_prefix(top)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }) && !path.starts_with("/var/tmp/")
}

/// The most workspace paths of one line the sandbox is asked about.
const MAX_OPERANDS: usize = 32;

/// Programs whose words are no files they read.
const NOT_READING: &[&str] = &[
    "echo", "printf", "true", "false", "pwd", "cd", "which", "type", "command", "date", "whoami",
    "id", "uname", "env", "printenv", "sleep", "seq", "basename", "dirname", "hostname", "test",
    "[", "expr", "git",
];

/// The workspace paths (relative to its root) an allowed command is given to read: its
/// static operands but patterns, joined to its folder inside the workspace. Globs and
/// expansions are left to the sandbox's own view of the files.
fn read_operands(command: &Command) -> Vec<String> {
    let (Some(program), bash::Cwd::Inside(folder)) = (command.program(), &command.cwd) else {
        return Vec::new();
    };
    if NOT_READING.contains(&program) {
        return Vec::new();
    }
    let patterns = bash::pattern_positions(&command.argv);
    // Values of the options that take one are no paths (`head -n 5 f`, `grep -m 1 x f`).
    let valued = [
        "-n", "-c", "-m", "-A", "-B", "-C", "-e", "-f", "-d", "-t", "-k", "-s", "-w",
    ];
    bash::operands(command.args(), &valued)
        .into_iter()
        .filter(|(at, _)| !patterns.contains(&(at + 1)))
        .filter_map(|(_, word)| word.as_static())
        .filter(|text| {
            !text.is_empty()
                && !text.starts_with(['/', '~'])
                && !text.contains(['*', '?', '[', '='])
        })
        .map(|text| normalize(&format!("{folder}/{text}")))
        .filter(|path| !path.is_empty() && path != ".." && !path.starts_with("../"))
        .collect()
}
