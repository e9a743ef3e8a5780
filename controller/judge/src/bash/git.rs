//! git: config keys whose values git runs, the code a git command hands on (`-c
//! core.fsmonitor=…`, `submodule foreach`, `difftool -x` …), and whether a repository's own
//! config could make a read-only git command run a program ([`repo_config`]).

mod repo_config;

pub use repo_config::{repo_config_runs_programs, repo_config_runs_programs_at};

use super::options::values;
use super::{Command, Cwd};
use crate::paths::normalize;
use crate::shell::Word;

/// Keys (lowercase; `*` is a subsection) whose value git runs as a command.
const CODE_KEYS: &[&str] = &[
    "core.fsmonitor",
    "core.pager",
    "core.editor",
    "core.sshcommand",
    "core.askpass",
    "core.gitproxy",
    "core.alternaterefscommand",
    "diff.external",
    "diff.*.textconv",
    "diff.*.command",
    "difftool.*.cmd",
    "mergetool.*.cmd",
    "merge.*.driver",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "pager.*",
    "sequence.editor",
    "gpg.program",
    "gpg.*.program",
    "credential.helper",
    "credential.*.helper",
    "uploadpack.packobjectshook",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "sendemail.smtpserver",
];

/// Keys whose value leads git to run or load something else: hooks, more config.
const RUN_KEYS: &[&str] = &["core.hookspath", "include.path", "includeif.*.path"];

/// Whether `key` (any case) matches `pattern` (lowercase, `*` one subsection).
fn key_matches(pattern: &str, key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let (Some((section, rest)), Some((p_section, p_rest))) =
        (key.split_once('.'), pattern.split_once('.'))
    else {
        return false;
    };
    if section != p_section {
        return false;
    }
    match p_rest.split_once('.') {
        // `section.*.name`: a subsection, any.
        Some((_, p_name)) => rest
            .rsplit_once('.')
            .is_some_and(|(_, name)| name == p_name),
        None if p_rest == "*" => true,
        None => rest == p_rest,
    }
}

/// Whether git runs this key's value as a command.
pub(crate) fn is_code_key(key: &str) -> bool {
    CODE_KEYS.iter().any(|p| key_matches(p, key))
}

/// Whether this key makes git run or load something (a command, hooks, more config).
pub(crate) fn is_program_key(key: &str) -> bool {
    is_code_key(key) || RUN_KEYS.iter().any(|p| key_matches(p, key))
}

/// Whether `-c key=value` turns the key's program off.
pub(crate) fn disables(key: &str, value: &str) -> bool {
    let key = key.to_ascii_lowercase();
    match key.as_str() {
        "core.fsmonitor" => matches!(value, "" | "false" | "0" | "no" | "off"),
        "core.hookspath" => value == "/dev/null",
        "core.pager" => matches!(value, "" | "cat"),
        "diff.external" => value.is_empty(),
        _ if key.starts_with("pager.") => matches!(value, "" | "cat" | "false"),
        _ => false,
    }
}

/// git's options before the subcommand, and where the subcommand is.
pub(crate) struct Global {
    /// `-c key=value` pairs (static ones).
    pub(crate) config: Vec<(String, String)>,
    /// Options other than `-c`, as written.
    pub(crate) other: Vec<String>,
    /// `--config-env` was given: a key's value comes from the environment.
    pub(crate) config_env: Vec<String>,
    /// A `-c` whose value is not static.
    pub(crate) dynamic: bool,
    /// `-C DIR` folders, in order (`None` for one not static).
    pub(crate) dirs: Vec<Option<String>>,
    /// The subcommand's index in argv.
    pub(crate) sub: Option<usize>,
}

/// Reads git's global options (`git -c k=v --no-pager log …`).
pub(crate) fn global(argv: &[Word]) -> Global {
    let mut global = Global {
        config: Vec::new(),
        other: Vec::new(),
        config_env: Vec::new(),
        dynamic: false,
        dirs: Vec::new(),
        sub: None,
    };
    let mut at = 1;
    while let Some(word) = argv.get(at) {
        let text = word.text();
        if !text.starts_with('-') {
            global.sub = Some(at);
            break;
        }
        let (value, step) = match text {
            "-c" | "--config-env" | "-C" | "--git-dir" | "--work-tree" | "--namespace"
            | "--exec-path" | "--super-prefix" => (argv.get(at + 1), 2),
            _ => (None, 1),
        };
        match text {
            "-c" => match value.and_then(Word::as_static) {
                Some(pair) => {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, "true"));
                    global.config.push((key.to_owned(), value.to_owned()));
                }
                None => global.dynamic = true,
            },
            "--config-env" => global.config_env.extend(value.map(|v| v.text().to_owned())),
            "-C" => global
                .dirs
                .push(value.and_then(Word::as_static).map(str::to_owned)),
            _ if text.starts_with("--config-env=") => global.config_env.push(text[13..].to_owned()),
            _ => global.other.push(text.to_owned()),
        }
        at += step;
    }
    global
}

/// The folder git starts from, relative to the workspace root: the command's folder, moved by
/// each `-C`; `None` when it is not known to be inside the workspace.
pub fn start_folder(command: &Command) -> Option<String> {
    let Cwd::Inside(mut folder) = command.cwd.clone() else {
        return None;
    };
    for dir in global(&command.argv).dirs {
        let dir = dir?;
        if dir.starts_with('/') || dir.starts_with('~') {
            return None;
        }
        folder = normalize(&format!("{folder}/{dir}"));
        if folder == ".." || folder.starts_with("../") {
            return None;
        }
    }
    Some(folder)
}

/// The shell code a git command hands on, with who runs it.
pub(crate) fn code(command: &Command) -> Vec<(String, String)> {
    let argv = &command.argv;
    let global = global(argv);
    let mut out = Vec::new();
    for (key, value) in &global.config {
        if is_code_key(key) && !disables(key, value) {
            out.push((
                format!("git -c {key}"),
                value.trim_start_matches('!').to_owned(),
            ));
        }
    }
    for pair in &global.config_env {
        // `--config-env=key=VAR`: the value is VAR's, maybe set on this very command.
        let Some((key, variable)) = pair.split_once('=') else {
            continue;
        };
        if let Some((_, Word::Static(value))) =
            command.assignments.iter().find(|(n, _)| n == variable)
        {
            out.push((format!("git --config-env {key}"), value.clone()));
        }
    }
    if let Some(sub) = global.sub {
        out.extend(subcommand_code(argv[sub].text(), &argv[sub + 1..]));
    }
    out
}

/// The code a git subcommand runs: `submodule foreach`, `difftool -x`, `rebase --exec` …
fn subcommand_code(subcommand: &str, args: &[Word]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let who = |what: &str| format!("git {subcommand} {what}");
    let push_values =
        |out: &mut Vec<(String, String)>, short: Option<char>, long: &str, label: &str| {
            for value in values(args, short, Some(long), "") {
                out.push((format!("git {subcommand} {label}"), value.text().to_owned()));
            }
        };
    match subcommand {
        "config" => {
            if let Some((key, value)) = config_assignment(args)
                && is_code_key(&key)
            {
                out.push((who(&key), value.trim_start_matches('!').to_owned()));
            }
            if let Some((key, value)) = config_assignment(args)
                && key.to_ascii_lowercase().starts_with("alias.")
                && let Some(shell) = value.strip_prefix('!')
            {
                out.push((who(&key), shell.to_owned()));
            }
        }
        "submodule" if args.first().is_some_and(|w| w.text() == "foreach") => {
            let rest: Vec<&str> = args[1..]
                .iter()
                .map(Word::text)
                .skip_while(|t| t.starts_with('-'))
                .collect();
            out.push((who("foreach"), rest.join(" ")));
        }
        "difftool" | "mergetool" => push_values(&mut out, Some('x'), "--extcmd", "-x"),
        "grep" => push_values(&mut out, Some('O'), "--open-files-in-pager", "-O"),
        "rebase" => push_values(&mut out, Some('x'), "--exec", "--exec"),
        "ls-remote" | "clone" | "fetch" | "pull" | "archive" | "push" | "send-pack" => {
            push_values(&mut out, Some('u'), "--upload-pack", "--upload-pack");
            push_values(&mut out, None, "--receive-pack", "--receive-pack");
            push_values(&mut out, None, "--exec", "--exec");
        }
        "bisect" if args.first().is_some_and(|w| w.text() == "run") => {
            let rest: Vec<&str> = args[1..].iter().map(Word::text).collect();
            out.push((who("run"), rest.join(" ")));
        }
        "filter-branch" => {
            for filter in [
                "tree", "index", "msg", "env", "commit", "parent", "tag-name",
            ] {
                let long = format!("--{filter}-filter");
                push_values(&mut out, None, &long, &long);
            }
        }
        _ => {}
    }
    out
}

/// `git config [options] [set] KEY VALUE`: the key and value set, when static.
fn config_assignment(args: &[Word]) -> Option<(String, String)> {
    let mut operands = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let text = word.text();
        if matches!(
            text,
            "-f" | "--file" | "--blob" | "--type" | "--default" | "--comment"
        ) {
            words.next();
        } else if !text.starts_with('-') {
            operands.push(text);
        }
    }
    if operands.first() == Some(&"set") {
        operands.remove(0);
    }
    match operands.as_slice() {
        [key, value, ..] => Some(((*key).to_owned(), (*value).to_owned())),
        _ => None,
    }
}

/// The key a git command sets that makes git run a program, if any.
pub(crate) fn sets_program(command: &Command) -> Option<String> {
    let global = global(&command.argv);
    if let Some(pair) = global.config_env.first() {
        return Some(format!("--config-env {pair}"));
    }
    if global.dynamic {
        return Some("-c with a value known only when it runs".to_owned());
    }
    if let Some((key, _)) = global
        .config
        .iter()
        .find(|(key, value)| is_program_key(key) && !disables(key, value))
    {
        return Some(key.clone());
    }
    let sub = global.sub?;
    if command.argv[sub].text() != "config" {
        return None;
    }
    let (key, _) = config_assignment(&command.argv[sub + 1..])?;
    let shell_alias = key.to_ascii_lowercase().starts_with("alias.");
    (is_program_key(&key) || shell_alias).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_with_subsections() {
        assert!(is_code_key("core.fsmonitor") && is_code_key("Core.FSMonitor"));
        assert!(is_code_key("filter.lfs.smudge") && is_code_key("diff.my.driver.textconv"));
        assert!(is_code_key("pager.log"));
        assert!(!is_code_key("core.autocrlf") && !is_code_key("filter.lfs.required"));
        assert!(is_program_key("core.hooksPath") && is_program_key("includeIf.gitdir:~/x.path"));
        assert!(disables("core.fsmonitor", "false") && !disables("core.fsmonitor", "./x"));
    }
}
